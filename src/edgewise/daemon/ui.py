"""``GET /ui``: a live dashboard, one self-contained page (no build step, no external assets) that polls
``/v1/queue`` every second and shows state, queue depth, throughput (a labelled chart of the last two minutes),
dead letters, each pipeline's steps (events in and out, outcomes), workers, sources and live channels. The map of
live results is ``/ui/map`` (``assets/map.html``)."""

DASHBOARD_HTML = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>edgewise daemon</title><link rel="icon" href="data:,">
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body{font:14px system-ui,sans-serif;margin:2rem;color:#1b1f24;background:#f6f8fa}
 h1{font-size:1.3rem;margin:0 0 1rem}
 .grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(11rem,1fr));gap:.8rem}
 .card{background:#fff;border:1px solid #d0d7de;border-radius:6px;padding:.8rem}
 .label{color:#57606a;font-size:.8rem} .value{font-size:1.5rem;font-variant-numeric:tabular-nums}
 .ready{color:#1a7f37} .busy{color:#9a6700} .down{color:#cf222e}
 table{border-collapse:collapse;margin-top:1rem;background:#fff} td,th{border:1px solid #d0d7de;padding:.3rem .6rem}
 canvas{background:#fff;border:1px solid #d0d7de;border-radius:6px;margin-top:1rem}
</style></head><body>
<h1>edgewise daemon <span id="state" class="busy">…</span></h1>
<div class="grid">
 <div class="card"><div class="label">queued events</div><div class="value" id="queued">–</div></div>
 <div class="card"><div class="label">in-flight entries</div><div class="value" id="inflight">–</div></div>
 <div class="card"><div class="label">processed events</div><div class="value" id="processed">–</div></div>
 <div class="card"><div class="label">events / s</div><div class="value" id="rate">–</div></div>
 <div class="card"><div class="label">dead letters</div><div class="value" id="dead">–</div></div>
 <div class="card"><div class="label">backpressure</div><div class="value" id="backpressure">–</div></div>
</div>
<p class="label">processed events per second, last two minutes (peak <span id="peak">0</span>/s) ·
 <a href="/ui/map">live map</a></p>
<canvas id="chart" width="720" height="120" aria-label="events per second, last two minutes"></canvas>
<table><thead><tr><th>pipeline</th><th>step</th><th>in</th><th>out</th><th>outcomes</th></tr></thead>
<tbody id="steps"></tbody></table>
<table><thead><tr><th>worker</th><th>pid</th><th>ready</th><th>alive</th><th>partitions</th><th>position</th>
<th>lag (entries / events)</th></tr></thead>
<tbody id="workers"></tbody></table>
<table><thead><tr><th>source</th><th>status</th></tr></thead><tbody id="sources"></tbody></table>
<table><thead><tr><th>live channel</th><th>published</th><th>subscribers</th><th>dropped</th></tr></thead>
<tbody id="live"></tbody></table>
<p class="label" id="updated">connecting…</p>
<script>
const rates = []; let last = null;
function cell(text){const td=document.createElement('td');td.textContent=String(text);return td}
function rows(id, items){const body=document.getElementById(id);body.replaceChildren(...items.map(cols=>{
  const tr=document.createElement('tr');cols.forEach(c=>tr.appendChild(cell(c)));return tr}))}
function draw(){const c=document.getElementById('chart'),g=c.getContext('2d');g.clearRect(0,0,c.width,c.height);
  const max=Math.max(1,...rates);document.getElementById('peak').textContent=Math.round(max);
  g.fillStyle='#57606a';g.font='11px system-ui';g.fillText(Math.round(max)+'/s',4,12);g.fillText('0/s',4,c.height-18);
  g.fillText('now',c.width-24,c.height-4);g.fillText('2 min ago',4,c.height-4);
  g.strokeStyle='#0969da';g.beginPath();
  rates.forEach((r,i)=>{const x=c.width-(rates.length-1-i)*6,y=c.height-4-(c.height-8)*r/max;
    i?g.lineTo(x,y):g.moveTo(x,y)});
  g.stroke()}
async function poll(){
  try{
    const q = await (await fetch('/v1/queue')).json(); const now = performance.now();
    const st=document.getElementById('state'); st.textContent=q.state;
    st.className = q.state==='ready' ? 'ready' : (q.state==='recovering' ? 'busy' : 'down');
    document.getElementById('queued').textContent=q.queued_events;
    document.getElementById('inflight').textContent=q.in_flight_entries;
    document.getElementById('processed').textContent=q.processed_events;
    document.getElementById('dead').textContent=q.dead_letters;
    document.getElementById('backpressure').textContent=q.backpressure?'on':'off';
    if(last){const r=Math.max(0,(q.processed_events-last.n)/((now-last.t)/1000));rates.push(r);
      if(rates.length>120)rates.shift();document.getElementById('rate').textContent=Math.round(r)}
    last={n:q.processed_events,t:now}; draw();
    rows('workers', q.workers.map(w=>[w.index,w.pid,w.ready,w.alive,
      w.partitions ? w.partitions.length+' of 128' : '-', w.position ?? '-',
      w.lag_entries === undefined ? '-' : w.lag_entries+' / '+w.lag_events]));
    rows('steps', (q.steps||[]).map(s=>[s.pipeline,s.step,s.in,s.out,
      Object.entries(s.outcomes).map(([k,v])=>k+' '+v).join(', ')]));
    rows('live', Object.entries(q.live||{}).map(([k,v])=>[k,v.published,v.subscribers,v.dropped]));
    rows('sources', Object.entries(q.sources).map(([k,v])=>[k,JSON.stringify(v)]));
    document.getElementById('updated').textContent='updated '+new Date().toISOString();
  }catch(e){document.getElementById('updated').textContent='daemon unreachable: '+e}
}
poll(); setInterval(poll, 1000);
</script></body></html>
"""
