// Starts a command the way Node.js GUIs start Python, and prints one JSON line about it.
// usage: node spawn.js STDIO ENV -- CMD ARGS...
//   STDIO: pipe (read stdout and stderr), unread (pipes nobody reads), inherit, ignore,
//          hangup (read stdout; close stderr after its first bytes, as a GUI that stops listening)
//   ENV:   inherit   {...process.env}
//          earlylog  {...process.env, ...earlylog env --json}: the README's Node.js recipe
//          bare      {PATH} only: the pitfall that drops EARLYLOG
const { execFileSync, spawn } = require('child_process');

const [stdioMode, envMode, dashes, cmd, ...args] = process.argv.slice(2);
if (dashes !== '--' || !cmd) {
  console.error('usage: node spawn.js STDIO ENV -- CMD ARGS...');
  process.exit(2);
}

const envs = {
  inherit: () => ({ ...process.env }),
  earlylog: () => ({ ...process.env, ...JSON.parse(execFileSync('earlylog', ['env', '--json'])) }),
  bare: () => ({ PATH: process.env.PATH }),
};
const stdio = { pipe: 'pipe', unread: 'pipe', inherit: 'inherit', ignore: 'ignore', hangup: 'pipe' }[stdioMode];

const started = Date.now();
const child = spawn(cmd, args, { stdio, env: envs[envMode]() });
const out = [];
const err = [];
if (stdioMode === 'pipe' || stdioMode === 'hangup') {
  child.stdout.on('data', (d) => out.push(d));
  child.stderr.on('data', (d) => (stdioMode === 'pipe' ? err.push(d) : child.stderr.destroy()));
}
// A child stuck on a full pipe would hang this test: give up after 20 s and say so.
const guard = setTimeout(() => child.kill('SIGKILL'), 20000);
child.on('close', (code, signal) => {
  clearTimeout(guard);
  process.stdout.write(JSON.stringify({
    code, signal, seconds: (Date.now() - started) / 1000,
    stdout: Buffer.concat(out).toString(), stderr: Buffer.concat(err).toString(),
  }) + '\n');
  // The unread pipes keep node's loop alive; we are done with them.
  process.exit(0);
});
