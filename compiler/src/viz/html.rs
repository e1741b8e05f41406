//! An SVG in one self-contained HTML page that pans (drag) and zooms
//! (wheel) by changing the SVG's viewBox: no external script or style.

use super::xml_escape;

/// `svg` (a standalone document) wrapped in a page titled `title`.
pub fn html_page(title: &str, svg: &str) -> String {
    format!(
        r#"<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>html,body{{margin:0;height:100%;overflow:hidden;background:#fff}}
#view{{width:100%;height:100%}}#view svg{{width:100%;height:100%;cursor:grab}}
#help{{position:fixed;right:8px;bottom:6px;font:12px sans-serif;color:#777}}</style></head>
<body><div id="view">{svg}</div><div id="help">drag to pan · wheel to zoom · double-click to reset</div>
<script>
(function () {{
  const svg = document.querySelector('#view svg');
  const initial = svg.getAttribute('viewBox').split(' ').map(Number);
  let [x, y, w, h] = initial;
  const apply = () => svg.setAttribute('viewBox', [x, y, w, h].join(' '));
  svg.removeAttribute('width'); svg.removeAttribute('height');
  svg.addEventListener('wheel', (e) => {{
    e.preventDefault();
    const r = svg.getBoundingClientRect(), k = e.deltaY > 0 ? 1.15 : 1 / 1.15;
    const px = x + (e.clientX - r.left) / r.width * w, py = y + (e.clientY - r.top) / r.height * h;
    w *= k; h *= k; x = px - (px - x) * k; y = py - (py - y) * k; apply();
  }}, {{ passive: false }});
  let drag = null;
  svg.addEventListener('mousedown', (e) => {{ drag = [e.clientX, e.clientY, x, y]; svg.style.cursor = 'grabbing'; }});
  window.addEventListener('mouseup', () => {{ drag = null; svg.style.cursor = 'grab'; }});
  window.addEventListener('mousemove', (e) => {{
    if (!drag) return;
    const r = svg.getBoundingClientRect();
    x = drag[2] - (e.clientX - drag[0]) / r.width * w; y = drag[3] - (e.clientY - drag[1]) / r.height * h; apply();
  }});
  svg.addEventListener('dblclick', () => {{ [x, y, w, h] = initial; apply(); }});
}})();
</script></body></html>
"#,
        title = xml_escape(title),
        svg = svg
    )
}
