// The HTTP API client: bearer token from localStorage, error bodies turned into exceptions,
// and a server-sent-events reader built on fetch (EventSource cannot send a bearer header,
// and a token in the URL would end up in access logs).

const TOKEN_KEY = "paretune.token";

export class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || `HTTP ${status}`);
    this.status = status;
    this.code = err.code || String(status);
    this.field = err.field || null;
    this.reason = err.reason || null;
  }
}

export const auth = {
  get token() { return localStorage.getItem(TOKEN_KEY); },
  set token(value) {
    if (value) localStorage.setItem(TOKEN_KEY, value);
    else localStorage.removeItem(TOKEN_KEY);
  },
  onUnauthorized: () => {},
};

function headers(extra) {
  const h = { Accept: "application/json", ...extra };
  if (auth.token) h.Authorization = `Bearer ${auth.token}`;
  return h;
}

export async function request(method, path, { body, signal, token } = {}) {
  const init = { method, signal, headers: headers(body ? { "Content-Type": "application/json" } : {}) };
  if (token) init.headers.Authorization = `Bearer ${token}`;
  if (body) init.body = JSON.stringify(body);
  const res = await fetch(path, init);
  if (res.status === 204) return null;
  const data = await res.json().catch(() => null);
  if (!res.ok) {
    const error = new ApiError(res.status, data);
    if (res.status === 401 && !token) auth.onUnauthorized(error);
    throw error;
  }
  return data;
}

export const get = (path, opts) => request("GET", path, opts);
export const post = (path, body, opts) => request("POST", path, { ...opts, body: body || {} });

export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== null && v !== undefined && v !== "" && v !== false) q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : "";
}

/**
 * Follow an SSE endpoint: calls onEvent(type, data, id) for each event, reconnects after
 * network errors from the last event id, and stops on `end`, on abort, or on a 4xx.
 */
export async function follow(path, { onEvent, onState = () => {}, signal, after = 0 }) {
  let lastId = after;
  let retryMs = 2000;
  while (!signal.aborted) {
    try {
      onState("connecting");
      const sep = path.includes("?") ? "&" : "?";
      const res = await fetch(`${path}${sep}after=${lastId}`, { headers: headers({ Accept: "text/event-stream" }), signal });
      if (!res.ok) {
        const error = new ApiError(res.status, await res.json().catch(() => null));
        if (res.status === 401) auth.onUnauthorized(error);
        throw error;
      }
      onState("live");
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += value;
        const blocks = buffer.split(/\r?\n\r?\n/);
        buffer = blocks.pop();
        for (const block of blocks) {
          const event = parseBlock(block);
          if (event.retry) retryMs = event.retry;
          if (event.id !== null) lastId = event.id;
          if (!event.data) continue;
          if (event.type === "end") { onEvent("end", JSON.parse(event.data), lastId); onState("ended"); return; }
          onEvent(event.type, JSON.parse(event.data), lastId);
        }
      }
    } catch (error) {
      if (signal.aborted) return;
      if (error instanceof ApiError && error.status < 500) { onState("closed"); throw error; }
    }
    onState("reconnecting");
    await new Promise((r) => setTimeout(r, retryMs));
  }
}

function parseBlock(block) {
  const event = { type: "message", data: "", id: null, retry: null };
  const data = [];
  for (const line of block.split(/\r?\n/)) {
    if (!line || line.startsWith(":")) continue;
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event.type = value;
    else if (field === "data") data.push(value);
    else if (field === "id" && /^\d+$/.test(value)) event.id = Number(value);
    else if (field === "retry" && /^\d+$/.test(value)) event.retry = Number(value);
  }
  event.data = data.join("\n");
  return event;
}
