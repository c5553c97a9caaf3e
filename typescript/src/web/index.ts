/**
 * Web actions over fetch: requests that change something, sent once however often they
 * are retried, with Idempotency-Key for the provider. docs/typescript.md, "Web actions".
 */

export { Actions } from "./actions.js";
export type { ActionsOptions, CallOptions, HeaderValues, UpstreamKey, WebInput, WebSettings } from "./options.js";
export { callInfo, StatusError } from "./recorded.js";
export type { CallInfo, RecordedResponse, StatusErrorOptions } from "./recorded.js";
