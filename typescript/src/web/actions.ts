/**
 * `Actions`: web actions over fetch, deduplicated by the core's machinery (claim, heartbeat,
 * completion under the fence, replay). The Python package's pg_idempotency.http.Actions.
 */

import { run } from "../call.js";
import { currentCall } from "../context.js";
import type { StoreSource } from "../drivers/index.js";
import { defaultStore } from "../idempotent.js";
import { uuidContextOf } from "../plan.js";
import { Store } from "../store.js";
import type { CallContext } from "../context.js";
import { WebCall } from "./call.js";
import { defaultsOf } from "./options.js";
import type { ActionsOptions, CallOptions, HeaderValues } from "./options.js";

/**
 * Requests that change something, sent once however often they are retried.
 *
 *     const api = new Actions({ store, headers: { authorization: `Bearer ${token}` } });
 *     const r = await api.post("https://api.example.com/v1/emails", {
 *       json: { to: "ann@example.com" },
 *       ttl: 86_400_000,
 *     });
 *
 * POST, PUT, PATCH and DELETE are deduplicated and carry `Idempotency-Key` (the record's
 * uuid, the same on every attempt, a takeover included); GET, HEAD, OPTIONS and TRACE run
 * every time, with no key, unless the call gives settings of its own (`ttl: 60_000`). A
 * status other than 2xx throws StatusError. The settings given here apply to every call
 * that changes something; a call's own replace them one by one.
 */
export class Actions {
  private readonly defaults: Readonly<Record<string, unknown>>;
  private readonly fetch: typeof globalThis.fetch;
  private readonly base: { headers: HeaderValues | undefined; baseUrl: string | URL | undefined };
  private readonly source: Store | StoreSource | undefined;
  private own: Store | undefined;

  constructor(options: ActionsOptions = {}) {
    this.defaults = defaultsOf(options);
    this.fetch = options.fetch ?? globalThis.fetch;
    this.base = { headers: options.headers, baseUrl: options.baseUrl };
    this.source = options.store;
  }

  /** Send `method url` as fetch does (`headers`, `body`, `signal`, ...; `json` for a JSON
   * body), under the settings given here and the call's own (`ttl`, `key`, ...). */
  async request(method: string, url: string | URL, options: CallOptions = {}): Promise<Response> {
    const call = WebCall.of(method, url, options, this.defaults, this.base);
    const plan = call.plan;
    if (plan === null) return call.plain(await this.send(call, undefined));
    if (plan.strategy === "uuid") return call.plain(await this.send(call, uuidContextOf(plan))); // a fresh key, sent; nothing recorded
    let result: unknown;
    try {
      result = await run(this.store(), plan, async () => call.recorded(await this.send(call, currentCall())));
    } catch (e) {
      throw call.failed(e);
    }
    return call.answer(result);
  }

  private async send(call: WebCall, ctx: CallContext | undefined): Promise<Response> {
    const init = call.request(ctx);
    // A signal aborted already (a timeout that ran out during the claim): fetch would
    // refuse at once, having sent nothing; the claim is released, not left to lapse.
    if (init.signal?.aborted === true) throw init.signal.reason;
    try {
      return await this.fetch(call.url, init);
    } catch (e) {
      call.leftUnanswered(e);
      throw e;
    }
  }

  private store(): Store {
    if (this.source === undefined) return defaultStore();
    if (this.source instanceof Store) return this.source;
    this.own ??= new Store(this.source);
    return this.own;
  }

  get(url: string | URL, options?: CallOptions): Promise<Response> {
    return this.request("GET", url, options);
  }

  head(url: string | URL, options?: CallOptions): Promise<Response> {
    return this.request("HEAD", url, options);
  }

  options(url: string | URL, options?: CallOptions): Promise<Response> {
    return this.request("OPTIONS", url, options);
  }

  post(url: string | URL, options?: CallOptions): Promise<Response> {
    return this.request("POST", url, options);
  }

  put(url: string | URL, options?: CallOptions): Promise<Response> {
    return this.request("PUT", url, options);
  }

  patch(url: string | URL, options?: CallOptions): Promise<Response> {
    return this.request("PATCH", url, options);
  }

  delete(url: string | URL, options?: CallOptions): Promise<Response> {
    return this.request("DELETE", url, options);
  }

  /** Close the store this made (a connection string or a pool given as `store`). */
  async close(): Promise<void> {
    await this.own?.close();
    this.own = undefined;
  }
}
