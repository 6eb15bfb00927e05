// ioa console: following the hub's event streams with resume.
//
// Design:
// - EventSource cannot send an Authorization header, and the console
//   never puts its token in a URL, so a stream is read with fetch() and a
//   ReadableStream and parsed here, as the HTML standard's event-stream
//   format says: lines end in CR LF, LF or CR; "data:" lines accumulate,
//   "event:", "id:" and "retry:" set their fields, a blank line dispatches,
//   ":" lines are comments (the hub's keepalives).
// - After any disconnect (a reload of nginx, a restart, a proxy timeout)
//   the stream is opened again with Last-Event-ID = the id of the last
//   event shown, after a backoff that doubles from the stream's "retry:"
//   (or 0.5 s) up to 10 s, with jitter so a restarted hub is not hit by
//   every console at once.
// - Ids are Redis Stream ids ("<ms>-<seq>", possibly after a prefix such
//   as "goal-<id>:"), compared as two integers: an event whose id is not
//   after the last one shown is dropped, so a resume that overlaps never
//   shows a line twice.
// - The last id and the events shown are kept in sessionStorage per
//   stream, written together (so they always agree), at most every 250 ms
//   and when the page is hidden: a reload repaints from there and resumes
//   exactly; whatever was shown but not yet written is simply fetched
//   again.  A stream that outgrows `keep` events stops being kept and a
//   reload reads it from its start instead: slower, never wrong.
// - A feed the hub does not have (404 unknown_endpoint, an older hub) falls
//   back to `poll`, a function that returns the events after an id.

import { authHeaders, HubError } from './api.js';

const BACKOFF_MIN = 500;
const BACKOFF_MAX = 10000;
const SAVE_EVERY = 250;
const POLL_EVERY = 2000;

// [ms, seq] as BigInts from "<ms>-<seq>" at the end of an id, or null
export function streamId(id) {
    const m = /(\d+)-(\d+)$/.exec(String(id || ''));
    return m ? [BigInt(m[1]), BigInt(m[2])] : null;
}

export function idAfter(x, y) {
    const a = streamId(x);
    const b = streamId(y);
    if (!a || !b) {
        return true;
    }
    return a[0] > b[0] || (a[0] === b[0] && a[1] > b[1]);
}

const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) {
        signal.addEventListener('abort', () => { clearTimeout(t); resolve(); },
                               { once: true });
    }
});

export class Feed {
    // opts: url, storeKey, onEvent({id, event, data}, replayed),
    // onStatus(state, detail): "connecting", "live", "reconnecting",
    // "polling", "error"; poll(lastId) optional;
    // keep: events kept for a reload
    constructor(opts) {
        this.opts = Object.assign({ keep: 2000 }, opts);
        this.last = null;
        this.kept = [];
        this.keeping = true;
        this.retry = BACKOFF_MIN;
        this.abort = new AbortController();
        this.saveTimer = null;
        this.onHide = () => this.save();
    }

    start() {
        this.restore();
        window.addEventListener('pagehide', this.onHide);
        this.run();
        return this;
    }

    stop() {
        this.save();
        this.abort.abort();
        window.removeEventListener('pagehide', this.onHide);
    }

    get stopped() {
        return this.abort.signal.aborted;
    }

    status(state, detail) {
        if (!this.stopped && this.opts.onStatus) {
            this.opts.onStatus(state, detail);
        }
    }

    restore() {
        let saved = null;
        try {
            saved = JSON.parse(sessionStorage.getItem(this.opts.storeKey) || 'null');
        } catch (e) {
            saved = null;
        }
        if (!saved || !Array.isArray(saved.events)) {
            return;
        }
        for (const ev of saved.events) {
            this.deliver(ev, true);
        }
    }

    save() {
        clearTimeout(this.saveTimer);
        this.saveTimer = null;
        if (!this.keeping) {
            return;
        }
        try {
            sessionStorage.setItem(this.opts.storeKey,
                JSON.stringify({ last: this.last, events: this.kept }));
        } catch (e) {
            // the tab's storage is full: forget this stream, reload reads it all
            this.keeping = false;
            sessionStorage.removeItem(this.opts.storeKey);
        }
    }

    saveSoon() {
        if (this.keeping && !this.saveTimer) {
            this.saveTimer = setTimeout(() => this.save(), SAVE_EVERY);
        }
    }

    // hands one event to the page unless it is not after the last shown
    deliver(ev, replayed) {
        if (ev.id && this.last && !idAfter(ev.id, this.last)) {
            return;
        }
        if (ev.id) {
            this.last = ev.id;
        }
        if (this.keeping) {
            this.kept.push(ev);
            if (this.kept.length > this.opts.keep) {
                this.keeping = false;
                this.kept = [];
                sessionStorage.removeItem(this.opts.storeKey);
            }
        }
        if (!replayed) {
            this.saveSoon();
        }
        try {
            this.opts.onEvent(ev, replayed);
        } catch (e) {
            console.warn('ioa console: an event could not be shown', e);
        }
    }

    async run() {
        const signal = this.abort.signal;
        while (!this.stopped) {
            this.status('connecting');
            try {
                const headers = authHeaders({ Accept: 'text/event-stream' });
                const since = this.last || this.opts.since;
                if (since) {
                    headers['Last-Event-ID'] = since;
                }
                const res = await fetch(this.opts.url, {
                    headers, cache: 'no-store', credentials: 'omit', signal,
                });
                if (!res.ok) {
                    let doc = null;
                    try {
                        doc = await res.json();
                    } catch (e) {
                        doc = null;
                    }
                    throw new HubError(res.status, doc, `${res.status} ${res.statusText}`);
                }
                this.retry = this.opts.retry || BACKOFF_MIN;
                this.status('live');
                await this.read(res.body);
            } catch (e) {
                if (this.stopped) {
                    return;
                }
                if (e instanceof HubError && e.status === 404
                    && e.code === 'unknown_endpoint' && this.opts.poll)
                {
                    return this.polling();
                }
                if (this.fatal(e)) {
                    return;
                }
            }
            if (this.stopped) {
                return;
            }
            const wait = this.backoff();
            this.status('reconnecting', wait);
            await sleep(wait, signal);
        }
    }

    // 4xx but 408/429 will not get better by retrying: shown, not retried
    fatal(e) {
        if (e instanceof HubError && e.status >= 400 && e.status < 500
            && e.status !== 408 && e.status !== 429)
        {
            this.status('error', e);
            return true;
        }
        return false;
    }

    backoff() {
        const wait = this.retry;
        this.retry = Math.min(this.retry * 2, BACKOFF_MAX);
        return wait / 2 + Math.random() * wait / 2;
    }

    async polling() {
        const signal = this.abort.signal;
        this.status('polling');
        while (!this.stopped) {
            try {
                const events = await this.opts.poll(this.last);
                for (const ev of events) {
                    this.deliver(ev, false);
                }
                this.retry = BACKOFF_MIN;
                this.status('polling');
                await sleep(POLL_EVERY, signal);
            } catch (e) {
                if (this.stopped || this.fatal(e)) {
                    return;
                }
                const wait = this.backoff();
                this.status('reconnecting', wait);
                await sleep(wait, signal);
            }
        }
    }

    // the event-stream format, incrementally
    async read(body) {
        const reader = body.getReader();
        const decoder = new TextDecoder('utf-8');
        let buf = '';
        let data = [];
        let event = '';
        let id = null;

        const line = (l) => {
            if (l === '') {
                if (data.length) {
                    this.deliver({ id, event: event || 'message', data: data.join('\n') }, false);
                }
                data = [];
                event = '';
                id = null;      // only an event's own id is compared
                return;
            }
            if (l[0] === ':') {
                return;
            }
            const colon = l.indexOf(':');
            const name = colon < 0 ? l : l.slice(0, colon);
            let value = colon < 0 ? '' : l.slice(colon + 1);
            if (value[0] === ' ') {
                value = value.slice(1);
            }
            if (name === 'data') {
                data.push(value);
            } else if (name === 'event') {
                event = value;
            } else if (name === 'id') {
                if (!value.includes('\0')) {
                    id = value;
                }
            } else if (name === 'retry' && /^\d+$/.test(value)) {
                this.opts.retry = Math.max(BACKOFF_MIN, Number(value));
            }
        };

        for (;;) {
            const { value, done } = await reader.read();
            if (done) {
                break;
            }
            buf += decoder.decode(value, { stream: true });
            let m;
            const re = /\r\n|\r|\n/g;
            let from = 0;
            while ((m = re.exec(buf)) !== null) {
                // a CR at the very end may be the first half of CR LF
                if (m[0] === '\r' && m.index === buf.length - 1) {
                    break;
                }
                line(buf.slice(from, m.index));
                from = m.index + m[0].length;
            }
            buf = buf.slice(from);
        }
    }
}
