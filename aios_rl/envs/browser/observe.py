"""What the page shows, read in the page by one script: every visible interactive element
numbered (``data-aid``, renumbered in document order at each observation, so the same page
gives the same numbers) with its role, accessible name, value, checked state and options, and
the visible text between them. The same script resolves a number back to the element."""

from __future__ import annotations

__all__ = ["AID", "OBSERVE_JS"]

AID = "data-aid"
"""The attribute the script numbers interactive elements with."""

OBSERVE_JS = r"""
(exclude) => {
  const INTERACTIVE = 'a[href], button, input:not([type=hidden]), select, textarea, ' +
    '[role=button], [role=link], [role=checkbox], [role=radio], [role=tab], [role=option], ' +
    '[role=menuitem], [role=switch], [role=textbox], [role=combobox], [onclick], ' +
    '[contenteditable=true]';
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD']);
  const excluded = (exclude || []).flatMap(s => Array.from(document.querySelectorAll(s)));
  const isExcluded = el => excluded.some(x => x === el || x.contains(el));
  const visible = el => {
    const r = el.getBoundingClientRect();
    if (r.width <= 0 || r.height <= 0) return false;
    const s = getComputedStyle(el);
    return s.visibility !== 'hidden' && s.display !== 'none' && s.opacity !== '0';
  };
  const clean = t => (t || '').replace(/\s+/g, ' ').trim();
  const textOf = el => clean(el.innerText !== undefined ? el.innerText : el.textContent);
  const nameOf = el => {
    const aria = el.getAttribute('aria-label');
    if (aria) return clean(aria);
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const t = by.split(/\s+/).map(id => document.getElementById(id)).filter(Boolean)
        .map(textOf).join(' ');
      if (t) return clean(t);
    }
    if (el.labels && el.labels.length) return clean(Array.from(el.labels).map(textOf).join(' '));
    const tag = el.tagName;
    if (tag === 'INPUT' && ['submit', 'button', 'reset'].includes(el.type)) return clean(el.value);
    if (tag === 'INPUT' || tag === 'TEXTAREA') {
      return clean(el.getAttribute('placeholder') || el.getAttribute('title') ||
        el.getAttribute('name') || el.id || '');
    }
    if (tag === 'SELECT') return clean(el.getAttribute('title') || el.getAttribute('name') || el.id);
    const t = textOf(el);
    if (t) return t.slice(0, 120);
    return clean(el.getAttribute('title') || el.getAttribute('alt') || el.id || '');
  };
  const roleOf = el => {
    const r = el.getAttribute('role');
    if (r) return r;
    const tag = el.tagName;
    if (tag === 'A') return 'link';
    if (tag === 'BUTTON') return 'button';
    if (tag === 'SELECT') return 'combobox';
    if (tag === 'TEXTAREA') return 'textbox';
    if (tag === 'INPUT') {
      const t = (el.type || 'text').toLowerCase();
      if (t === 'checkbox') return 'checkbox';
      if (t === 'radio') return 'radio';
      if (['submit', 'button', 'reset', 'image'].includes(t)) return 'button';
      if (t === 'number') return 'spinbutton';
      if (t === 'search') return 'searchbox';
      return 'textbox';
    }
    if (el.isContentEditable) return 'textbox';
    return 'generic';
  };
  document.querySelectorAll('[data-aid]').forEach(el => el.removeAttribute('data-aid'));
  const out = [];
  let n = 0;
  const walk = node => {
    if (node.nodeType === Node.TEXT_NODE) {
      const t = clean(node.textContent);
      const parent = node.parentElement;
      const label = parent ? parent.closest('label') : null;
      if (label && label.control) return;  // a label names its control: shown there
      if (t && parent && !parent.closest('[data-aid]') && visible(parent) && !isExcluded(parent)) {
        const h = parent.closest('h1, h2, h3, h4, h5, h6');
        out.push({id: null, role: h ? 'heading' : 'text', name: t.slice(0, 200)});
      }
      return;
    }
    if (node.nodeType !== Node.ELEMENT_NODE || SKIP.has(node.tagName)) return;
    const el = node;
    if (el.matches(INTERACTIVE) && visible(el) && !isExcluded(el) && !el.closest('[data-aid]')) {
      n += 1;
      el.setAttribute('data-aid', String(n));
      const role = roleOf(el);
      const rec = {id: n, role, name: nameOf(el), disabled: !!el.disabled};
      if (role === 'checkbox' || role === 'radio' || role === 'switch') {
        rec.checked = el.checked !== undefined ? !!el.checked :
          el.getAttribute('aria-checked') === 'true';
      }
      if (el.tagName === 'SELECT') {
        rec.options = Array.from(el.options).map(o => clean(o.textContent));
        rec.value = el.selectedIndex >= 0 ? clean(el.options[el.selectedIndex].textContent) : '';
      } else if (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA') {
        if (!['checkbox', 'radio', 'submit', 'button', 'reset', 'image'].includes(el.type)) {
          rec.value = el.value;
        }
      }
      out.push(rec);
      return;  // its text is its name
    }
    for (const child of el.childNodes) walk(child);
  };
  if (document.body) walk(document.body);
  return {url: location.pathname + location.search, elements: out};
}
"""
