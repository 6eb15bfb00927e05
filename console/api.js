// ioa console: talking to the hub, and who is asking.
//
// Design:
// - The token is pasted once and kept in sessionStorage: it lives as long
//   as the tab, is not shared with other tabs or sites, and is gone when
//   the browser closes.  It is only ever sent as "Authorization: Bearer"
//   (never ?access_token=, which nginx would write to its access log).
// - The JWT's payload is decoded here only to show the subject and to grey
//   out what its scopes cannot do; nothing is verified in the browser.  The
//   hub stays the judge: every 401/403 it sends becomes a HubError whose
//   text is the hub's own message ("the token of "eye" lacks the "admin"
//   scope"), shown in the page, never a blank view.
// - Open mode (ioa_auth off) is detected, not configured: a request that
//   needs the admin scope succeeding without a token means nobody asks.
// - The console is served by the hub itself, so every URL is same-origin
//   and relative to the root ("/goals/..."), whatever prefix serves the
//   static files.

const TOKEN_KEY = 'ioa.console.token';

export class HubError extends Error {
    constructor(status, doc, fallback) {
        const d = (doc && typeof doc === 'object') ? doc : {};
        super(d.message || fallback || `HTTP ${status}`);
        this.status = status;
        this.code = d.code || null;
        this.field = d.field || null;
    }
}

export const session = {
    open: false,        // the hub runs with ioa_auth off
    token: null,
    claims: null,       // the token's payload, decoded, unverified

    load() {
        this.token = sessionStorage.getItem(TOKEN_KEY);
        this.claims = this.token ? decodeToken(this.token) : null;
        if (this.token && !this.claims) {
            this.signOut();
        }
    },

    signIn(token) {
        this.token = token;
        this.claims = decodeToken(token);
        sessionStorage.setItem(TOKEN_KEY, token);
    },

    // everything the console kept for this tab: the token, feed positions
    signOut() {
        this.token = null;
        this.claims = null;
        sessionStorage.clear();
    },

    get subject() {
        return this.claims ? String(this.claims.sub || '') : '';
    },

    get scopes() {
        if (!this.claims) {
            return [];
        }
        const c = this.claims;
        if (typeof c.scope === 'string') {
            return c.scope.split(/\s+/).filter(Boolean);
        }
        return Array.isArray(c.scopes) ? c.scopes.map(String) : [];
    },

    // may the token do what needs `scope`?  (admin includes observer and
    // launch, as in the hub; observer:<comm_id> counts for that room)
    can(scope, commId) {
        if (this.open) {
            return true;
        }
        const s = this.scopes;
        if (s.includes(scope) || s.includes('admin')) {
            return true;
        }
        return scope === 'observer' && commId !== undefined
               && s.includes('observer:' + commId);
    },

    get expired() {
        return !!(this.claims && typeof this.claims.exp === 'number'
                  && this.claims.exp * 1000 < Date.now());
    },
};

// base64url JSON payload of a JWT, or null
export function decodeToken(token) {
    const parts = String(token).trim().split('.');
    if (parts.length !== 3) {
        return null;
    }
    try {
        let b = parts[1].replace(/-/g, '+').replace(/_/g, '/');
        b += '='.repeat((4 - b.length % 4) % 4);
        const bytes = Uint8Array.from(atob(b), (ch) => ch.charCodeAt(0));
        const claims = JSON.parse(new TextDecoder().decode(bytes));
        return (claims && typeof claims === 'object') ? claims : null;
    } catch (e) {
        return null;
    }
}

export function authHeaders(extra) {
    const headers = Object.assign({}, extra || {});
    if (session.token && !session.open) {
        headers.Authorization = 'Bearer ' + session.token;
    }
    return headers;
}

// One call: resolves to the decoded JSON (or text), rejects with a
// HubError for any non-2xx answer and for an unreachable hub (status 0).
export async function api(method, path, body, opts) {
    const init = {
        method,
        headers: authHeaders(body !== undefined ? { 'Content-Type': 'application/json' } : {}),
        cache: 'no-store',
        credentials: 'omit',
        signal: opts && opts.signal,
    };
    if (body !== undefined) {
        init.body = JSON.stringify(body);
    }
    let res;
    try {
        res = await fetch(path, init);
    } catch (e) {
        if (e.name === 'AbortError') {
            throw e;
        }
        throw new HubError(0, null, 'the hub is unreachable');
    }
    const text = await res.text();
    let doc = null;
    try {
        doc = text ? JSON.parse(text) : null;
    } catch (e) {
        doc = text;
    }
    if (!res.ok) {
        throw new HubError(res.status, doc, `${res.status} ${res.statusText}`);
    }
    return doc;
}

// The words a person reads when the hub refuses: what happened, the hub's
// own reason (which names a missing scope), and what to do about it.
export function explain(err, what) {
    if (!(err instanceof HubError)) {
        return `${what}: ${err && err.message ? err.message : err}`;
    }
    const why = err.message;
    switch (err.status) {
    case 0:
        return `${what}: the hub is unreachable. It is retried when you reload.`;
    case 401:
        return `${what}: the hub did not accept the token (401 ${err.code || 'unauthorized'}: ${why}). Sign in again with a valid token.`;
    case 403:
        return `${what}: not allowed (403 ${err.code || 'forbidden'}: ${why}).`;
    case 404:
        return `${what}: not found (404 ${err.code || ''}: ${why}).`;
    case 503:
        return `${what}: the hub cannot reach Redis right now (503: ${why}).`;
    default:
        return `${what}: ${err.status} ${err.code || ''}: ${why}`.replace(/\s+:/, ':');
    }
}

// Is anybody asking for tokens?  /list_all_agents needs admin, so if it
// answers without a token the hub is in open mode.
export async function detectOpenMode() {
    try {
        const res = await fetch('/list_all_agents?limit=1',
                                { cache: 'no-store', credentials: 'omit' });
        return res.ok;
    } catch (e) {
        return false;
    }
}
