"""The --html page: one self-contained file (no network) with the verdict and a timeline, one lane
per process, phases as bars, stalls, crashes and ends marked. It only renders the report's data."""
import html
import json

_STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}.verdict li:first-child{font-weight:bold}
.lane{display:flex;align-items:center;border-top:1px solid #eee;min-height:26px}
.label{width:22em;flex:none;font-family:monospace;font-size:12px;overflow:hidden;white-space:nowrap}
.track{position:relative;flex:1;height:22px}
.life{position:absolute;top:9px;height:4px;background:#9ab}
.phase{position:absolute;top:3px;height:16px;background:#7ac;opacity:.6;border-radius:2px}
.phase.open{background:#e9a23b}.phase.error{background:#d55}
.mark{position:absolute;top:0;width:3px;height:22px}
.mark.stall{background:#e9a23b}.mark.crashed,.mark.killed,.mark.vanished,.mark.failed{background:#c22}
.mark.exited,.mark.terminated{background:#393}
.state-stalled .label{color:#a60}.state-crashed .label,.state-vanished .label,.state-killed .label,
.state-failed .label{color:#c22}
.axis{font-size:12px;color:#666;margin-left:22em}
"""

# Builds the lanes from the embedded JSON: a page that shows lanes has run this script.
_SCRIPT = r"""
(function(){
var r=JSON.parse(document.getElementById('report-data').textContent);
var ps=r.processes, t0=Infinity, t1=-Infinity;
ps.forEach(function(p){
  [p.start,p.end,p.last_seen].forEach(function(t){if(t!=null){t0=Math.min(t0,t);t1=Math.max(t1,t);}});
  if(p.state==='running'||p.state==='stalled'){t1=Math.max(t1,r.generated);}
});
if(!isFinite(t0)){t0=0;t1=1;} if(t1<=t0){t1=t0+1;}
function x(t){return (100*(t-t0)/(t1-t0)).toFixed(3)+'%';}
function el(tag,cls,text){var e=document.createElement(tag);if(cls)e.className=cls;if(text!=null)e.textContent=text;return e;}
var tl=document.getElementById('timeline');
tl.appendChild(el('div','axis','0 s to '+(t1-t0).toFixed(1)+' s'));
ps.forEach(function(p){
  var lane=el('div','lane state-'+p.state); lane.setAttribute('data-pid',p.pid);
  lane.setAttribute('data-state',p.state);
  var label=el('div','label',(r.hosts.length>1?(p.host||'?')+':':'')+p.pid+' '+p.tag+' '+p.state);
  label.title=p.summary||p.command||''; lane.appendChild(label);
  var tr=el('div','track'); lane.appendChild(tr);
  var s=p.start==null?t0:p.start, e=p.end!=null?p.end:(p.state==='running'||p.state==='stalled'?r.generated:(p.last_seen||s));
  var life=el('span','life'); life.style.left=x(s); life.style.width='calc('+x(e)+' - '+x(s)+')'; tr.appendChild(life);
  (p.phases||[]).forEach(function(ph){
    if(ph.begin==null)return; var pe=ph.end!=null?ph.end:e;
    var b=el('span','phase'+(ph.outcome==='open'?' open':ph.outcome.indexOf('error')===0?' error':''));
    b.style.left=x(ph.begin); b.style.width='calc('+x(pe)+' - '+x(ph.begin)+' + 1px)';
    b.title=ph.name+' ('+ph.outcome+')'; b.setAttribute('data-phase',ph.name); tr.appendChild(b);
  });
  if(p.stall&&p.stall.since!=null){var m=el('span','mark stall');m.style.left=x(p.stall.since);
    m.title='stall: '+p.stall.text;tr.appendChild(m);}
  if(['exited','failed','crashed','killed','terminated','vanished'].indexOf(p.state)>=0){
    var m2=el('span','mark '+p.state);m2.style.left=x(e);m2.title=p.state+': '+(p.summary||'');tr.appendChild(m2);}
  tl.appendChild(lane);
});
})();
"""


def page(report):
    """The whole page as one string."""
    data = json.dumps(report).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    verdict = "".join("<li>%s</li>" % html.escape(line) for line in report["verdict"])
    problems = "".join("<li>%s</li>" % html.escape(p) for p in report["problems"])
    return ("<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>earlylog report: %s</title>"
            "<style>%s</style></head><body>\n<h1>earlylog report: %s</h1>\n<ul class=\"verdict\">%s</ul>\n"
            "<ul class=\"problems\">%s</ul>\n<div id=\"timeline\"></div>\n"
            "<script type=\"application/json\" id=\"report-data\">%s</script>\n<script>%s</script>\n"
            "</body></html>\n" % (html.escape(report["folder"]), _STYLE, html.escape(report["folder"]),
                                  verdict, problems, data, _SCRIPT))
