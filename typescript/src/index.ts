/**
 * pg-idempotency for TypeScript: idempotency keys that live in PostgreSQL.
 *
 *     import { configure, idempotent } from "pg-idempotency";
 *
 *     configure("postgresql://app@db/app");
 *
 *     export const sendEmail = idempotent(
 *       async function sendEmail(input: { to: string; subject: string }) {
 *         return provider.send(input.to, input.subject);
 *       },
 *       { ttl: 86_400_000 },
 *     );
 *
 * Three retries of sendEmail({ to: "ann@example.com", subject: "Hi" }) send one email.
 * docs/typescript.md says the rest.
 */

export type {
  BatchBegin,
  BatchCompletion,
  BatchItem,
  Begin,
  CallRecord,
  CompleteState,
  Outcome,
  RecordState,
} from "./answers.js";
export { agentKey, KEY_WARNING, MAX_KEY_BYTES, toolCallIdIn } from "./agent-keys.js";
export { canonicalJson, inputHash } from "./canonical.js";
export { currentCall, Lease, maybeCurrentCall } from "./context.js";
export type { CallContext, LeaseState } from "./context.js";
export type { PgQueryable, PgQueryConfig, PoolOptions, PostgresSql, StoreSource } from "./drivers/index.js";
export {
  Contention,
  fromSqlstate,
  GrantRoleCaller,
  IdempotencyError,
  InProgress,
  InvalidArgument,
  LeaseLost,
  Mismatch,
  NotInstalled,
  NotPermitted,
  OutcomeUnknown,
  RepeatRefused,
  ResponseTooLarge,
  StoreUnavailable,
  ToolFailed,
  Uncanonicalizable,
  Unrecorded,
} from "./errors.js";
export type {
  IdempotencyErrorOptions,
  InProgressOptions,
  UnrecordedOptions,
  WithResponse,
} from "./errors.js";
export { configure, idempotent } from "./idempotent.js";
export type {
  AsyncFunction,
  ClassDecorator,
  Idempotent,
  InputOf,
  MethodDecorator,
} from "./idempotent.js";
export { NOT_FOUND, UNKNOWN } from "./options.js";
export type {
  IdempotentOptions,
  KeyStrategy,
  OnCacheHit,
  OnMismatch,
  Reconcile,
  ReconcileRead,
  TransactionClient,
  UnknownOutcome,
} from "./options.js";
export { MAX_BATCH_ITEMS, Store } from "./store.js";
export type {
  BatchOptions,
  BeginOptions,
  CompleteOptions,
  StoreOptions,
} from "./store.js";

export { Actions, callInfo, StatusError } from "./web/index.js";
export type {
  ActionsOptions,
  CallInfo,
  CallOptions,
  HeaderValues,
  RecordedResponse,
  StatusErrorOptions,
  UpstreamKey,
  WebInput,
  WebSettings,
} from "./web/index.js";

export const VERSION = "0.9.0";
