// ioa console: building the page.
//
// Design: every node is made with createElement and every piece of data
// goes in as a text node, so a description like <img onerror=...> or an
// envelope carrying <script> shows as the literal text it is.  There is no
// innerHTML anywhere in the console (the CSP would also refuse inline
// script, but the console must not rely on that).  h() is the one builder:
// attributes are set with setAttribute (never "on*" handlers: events go
// through addEventListener), children are nodes or strings.

export function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
        if (v === undefined || v === null || v === false) {
            continue;
        }
        if (k.startsWith('on')) {
            throw new Error('h(): event handlers go through on(), not ' + k);
        }
        if (k === 'class') {
            el.className = v;
        } else if (k === 'text') {
            el.textContent = String(v);
        } else if (k === 'hidden' || k === 'disabled' || k === 'required') {
            el[k] = Boolean(v);
        } else {
            el.setAttribute(k, v === true ? '' : String(v));
        }
    }
    append(el, children);
    return el;
}

export function append(el, children) {
    for (const c of children.flat(Infinity)) {
        if (c === undefined || c === null || c === false) {
            continue;
        }
        el.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
}

export function on(el, type, fn) {
    el.addEventListener(type, fn);
    return el;
}

export function clear(el) {
    while (el.firstChild) {
        el.removeChild(el.firstChild);
    }
    return el;
}

// Unix ms as local "YYYY-MM-DD HH:MM:SS": sortable, the same in every
// browser (toLocaleString differs between Chromium and Firefox)
export function fmtTime(ms) {
    if (typeof ms !== 'number' || !isFinite(ms)) {
        return '';
    }
    const d = new Date(ms);
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} `
         + `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
}

// A message box: kind is "error", "info" or "ok"; errors are role=alert so
// a screen reader says them at once
export function notice(kind, ...children) {
    return h('div', { class: `notice notice-${kind}`,
                      role: kind === 'error' ? 'alert' : 'status' },
             ...children);
}

let uniq = 0;

export function uid(prefix) {
    uniq += 1;
    return `${prefix}-${uniq}`;
}

// <label for> + control, the console's one form row
export function field(labelText, control, hint) {
    const id = control.id || uid('f');
    control.id = id;
    const hintEl = hint ? h('span', { class: 'hint', id: id + '-hint', text: hint }) : null;
    if (hintEl) {
        control.setAttribute('aria-describedby', hintEl.id);
    }
    return h('div', { class: 'field' }, h('label', { for: id, text: labelText }),
             control, hintEl);
}
