/**
 * A real HTTP server (node:http) for the web actions' tests: it records every request it
 * receives (method, path, query, headers, body) and answers as a test scripts it, per
 * path: by default 201 with `{ path, n }` (n: the requests to that path so far), so that a
 * replay shows the first answer's n. A scripted answer may hold the request until the test
 * releases it; `arrived` resolves when the server has the request.
 */

import { createServer } from "node:http";
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { after } from "node:test";

import { Gate } from "./db.js";

export interface Seen {
  readonly method: string;
  readonly path: string;
  readonly query: string;
  /** Lower-case names. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Buffer;
  /** The Idempotency-Key it carried. */
  readonly key: string | undefined;
}

export interface Reply {
  status?: number;
  /** JSON; a string is sent as text/plain. */
  body?: unknown;
  headers?: Record<string, string>;
  /** Answer only once this gate is open. */
  hold?: Gate;
  /** Opened when the server has the request. */
  arrived?: Gate;
}

export class Upstream {
  readonly requests: Seen[] = [];
  private readonly scripts = new Map<string, Reply[]>();
  private readonly server: Server;
  url = "";

  private constructor() {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on("data", (c: Buffer) => chunks.push(c));
      req.on("end", () => {
        void this.answer(req, res, Buffer.concat(chunks));
      });
    });
  }

  /** A server listening on 127.0.0.1 (a free port), closed after the test file. */
  static async start(): Promise<Upstream> {
    const upstream = new Upstream();
    await new Promise<void>((resolve) => upstream.server.listen(0, "127.0.0.1", resolve));
    upstream.url = `http://127.0.0.1:${(upstream.server.address() as AddressInfo).port}`;
    after(() => upstream.stop());
    return upstream;
  }

  /** The host and port, as a default scope shows them. */
  get host(): string {
    return this.url.slice("http://".length);
  }

  /** The next answers to `path`, in order (then the default). */
  script(path: string, ...replies: Reply[]): void {
    this.scripts.set(path, [...(this.scripts.get(path) ?? []), ...replies]);
  }

  seen(path?: string): Seen[] {
    return this.requests.filter((r) => path === undefined || r.path === path);
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => { resolve(); }));
  }

  private async answer(req: IncomingMessage, res: ServerResponse, body: Buffer): Promise<void> {
    const target = new URL(req.url ?? "/", "http://x");
    const headers: Record<string, string> = {};
    for (const [name, value] of Object.entries(req.headers)) {
      if (value !== undefined) headers[name] = Array.isArray(value) ? value.join(", ") : value;
    }
    const seen: Seen = {
      method: req.method ?? "",
      path: target.pathname,
      query: target.search.slice(1),
      headers,
      body,
      key: headers["idempotency-key"],
    };
    this.requests.push(seen);
    const n = this.seen(seen.path).length;
    const reply = this.scripts.get(seen.path)?.shift() ?? {};
    reply.arrived?.open();
    if (reply.hold !== undefined) await reply.hold.promise;
    const payload = reply.body ?? { path: seen.path, n };
    const [data, kind] =
      typeof payload === "string"
        ? [Buffer.from(payload), "text/plain; charset=utf-8"]
        : [Buffer.from(JSON.stringify(payload)), "application/json"];
    res.on("error", () => undefined); // the client gave up waiting (a timeout): nobody reads the answer
    if (res.destroyed) return;
    res.writeHead(reply.status ?? 201, { "content-type": kind, "content-length": data.length, ...reply.headers });
    res.end(seen.method === "HEAD" ? undefined : data);
  }
}

/** A client's read timeout, as httpx's: an AbortSignal.timeout(ms) that starts once the
 * server has the request (so that it never fires while the request is still on its way,
 * however loaded the machine). */
export function readTimeout(arrived: Gate, ms: number): AbortSignal {
  const controller = new AbortController();
  void arrived.promise.then(() => {
    const timeout = AbortSignal.timeout(ms);
    timeout.addEventListener("abort", () => {
      controller.abort(timeout.reason);
    });
  });
  return controller.signal;
}
