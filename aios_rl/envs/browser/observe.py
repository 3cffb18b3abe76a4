"""What the page shows, read in the page by one script: the targets an agent can act on (found
and named by the rules of :mod:`.miniwob`'s ``_TARGETS_JS``, the one naming convention of the
browser environment: accessible name, an unassociated label just before a control, placeholder
or title, else the role; a repeated name gets `` (k)``), numbered in document order (``data-aid``,
renumbered at each observation, so the same page gives the same numbers) with their values,
checked states and options, and the visible text between them."""

from __future__ import annotations

from .miniwob import _TARGETS_JS

__all__ = ["AID", "OBSERVE_JS"]

AID = "data-aid"
"""The attribute the script numbers targets with."""

OBSERVE_JS = (
    r"""
(arg) => {
  const targets = ("""
    + _TARGETS_JS
    + r""")({op: "targets", exclude: arg.exclude});
  const skip = arg.exclude.join(",");
  const clean = t => (t || "").replace(/\s+/g, " ").trim();
  document.querySelectorAll("[data-aid]").forEach(el => el.removeAttribute("data-aid"));
  const index = new Map();
  targets.forEach((t, i) => { t.el.setAttribute("data-aid", String(i + 1)); index.set(t.el, t); });
  const out = [];
  const record = (el, n) => {
    const t = index.get(el);
    const role = t.role || "clickable";
    const rec = {id: n, role, name: t.name, disabled: !!el.disabled};
    if (el.tagName === "INPUT" && (el.type === "checkbox" || el.type === "radio")) {
      rec.checked = !!el.checked;
    } else if (el.getAttribute("aria-checked") !== null) {
      rec.checked = el.getAttribute("aria-checked") === "true";
    }
    if (el.tagName === "SELECT") {
      rec.options = Array.from(el.options).map(o => clean(o.textContent));
      rec.value = Array.from(el.selectedOptions).map(o => clean(o.textContent)).join(", ");
    } else if ((el.tagName === "INPUT" && !["checkbox", "radio", "submit", "button", "reset",
        "image"].includes(el.type)) || el.tagName === "TEXTAREA") {
      rec.value = el.value;
    }
    return rec;
  };
  const walk = (node, inTarget) => {
    if (node.nodeType === Node.TEXT_NODE) {
      const t = clean(node.textContent);
      const parent = node.parentElement;
      if (!t || !parent || inTarget) return;
      const label = parent.closest("label");
      if (label && (label.control || (label.nextElementSibling && index.has(label.nextElementSibling)))) {
        return;  // a label names its control: shown there
      }
      if (!parent.checkVisibility({visibilityProperty: true})) return;
      const h = parent.closest("h1, h2, h3, h4, h5, h6");
      out.push({id: null, role: h ? "heading" : "text", name: t.slice(0, 200)});
      return;
    }
    if (node.nodeType !== Node.ELEMENT_NODE) return;
    if (["SCRIPT", "STYLE", "NOSCRIPT", "TEMPLATE"].includes(node.tagName)) return;
    if (skip && node.matches(skip)) return;
    let inside = inTarget;
    if (index.has(node)) {
      out.push(record(node, Number(node.getAttribute("data-aid"))));
      inside = true;  // its text is its name
    }
    for (const child of node.childNodes) walk(child, inside);
  };
  if (document.body) walk(document.body, false);
  return {url: location.pathname + location.search, elements: out};
}
"""
)
