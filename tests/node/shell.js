// python-shell (what Node.js GUIs use) runs a script; prints when each line arrived, as JSON.
// usage: node shell.js PYTHON SCRIPT
const { PythonShell } = require('python-shell');

const [pythonPath, script] = process.argv.slice(2);
const started = Date.now();
const lines = [];
const shell = new PythonShell(script, { pythonPath, mode: 'text' });
shell.on('message', (text) => lines.push({ text, at: (Date.now() - started) / 1000 }));
shell.end((err, code, signal) => {
  process.stdout.write(JSON.stringify({ lines, code, signal, error: err ? String(err) : null }) + '\n');
});
