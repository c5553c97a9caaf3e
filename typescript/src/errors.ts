/**
 * Errors: one small hierarchy, a class per SQLSTATE of the SQL API (docs/errors.md) and per
 * decision the wrapper takes. Every error keeps the server's detail and hint. The same
 * classes as the Python package's errors.py.
 */

export interface IdempotencyErrorOptions {
  /** The server's DETAIL, or the package's own explanation. */
  detail?: string | undefined;
  /** What to do about it. */
  hint?: string | undefined;
  /** The SQLSTATE the server raised (a class's own code when not given). */
  sqlstate?: string | undefined;
  /** The driver's error, or the error this one explains. */
  cause?: unknown;
}

/**
 * Base of every error this package throws. `sqlstate`, `detail` and `hint` come from the
 * server when it refused the call (`sqlstate` is undefined for the wrapper's own decisions).
 */
export class IdempotencyError extends Error {
  /** The code a class stands for; an instance's `sqlstate` is the server's. */
  static readonly code: string | undefined = undefined;

  readonly sqlstate: string | undefined;
  readonly detail: string | undefined;
  readonly hint: string | undefined;

  constructor(message: string, options: IdempotencyErrorOptions = {}) {
    super(message, "cause" in options ? { cause: options.cause } : undefined);
    this.name = new.target.name;
    this.sqlstate = options.sqlstate ?? new.target.code;
    this.detail = options.detail ?? undefined;
    this.hint = options.hint ?? undefined;
  }

  /** The message with its detail and hint, as psql shows an error. */
  override toString(): string {
    const parts = [`${this.name}: ${this.message}`];
    if (this.detail) parts.push(`DETAIL: ${this.detail}`);
    if (this.hint) parts.push(`HINT: ${this.hint}`);
    return parts.join("\n");
  }
}

/**
 * 22023: a blank or over-long key or scope, a bad duration, an unknown policy word; and the
 * wrapper's own refusals (a blank explicit key, a value that is not JSON, options that
 * cannot work).
 */
export class InvalidArgument extends IdempotencyError {
  static override readonly code: string | undefined = "22023";
}

/** IK001: the key was used before with a different request. */
export class Mismatch extends IdempotencyError {
  static override readonly code: string | undefined = "IK001";
}

/** IK002: `onCacheHit: "failFast"` and the call was already made. */
export class RepeatRefused extends IdempotencyError {
  static override readonly code: string | undefined = "IK002";
}

export interface WithResponse extends IdempotencyErrorOptions {
  response?: unknown;
}

/**
 * IK003: the fence no longer holds the record (another attempt took the call over, or an
 * operator forgot it). `response` is the function's result when it had returned one: it
 * is not recorded; the record keeps the attempt that holds it.
 */
export class LeaseLost extends IdempotencyError {
  static override readonly code: string | undefined = "IK003";
  readonly response: unknown;

  constructor(message: string, options: WithResponse = {}) {
    super(message, options);
    this.response = options.response;
  }
}

/** IK004: the response is larger than the server's pg_idempotency.max_response_bytes. */
export class ResponseTooLarge extends IdempotencyError {
  static override readonly code: string | undefined = "IK004";
}

/** IK005: the request has no canonical form (nested deeper than 128 levels). */
export class Uncanonicalizable extends IdempotencyError {
  static override readonly code: string | undefined = "IK005";
}

/**
 * IK006: the call was made as a grant role (idempotency_user, idempotency_admin), which
 * owns no records: connect as the application's own role.
 */
export class GrantRoleCaller extends IdempotencyError {
  static override readonly code: string | undefined = "IK006";
}

/** 42501: the role may not do this (another role's records, or no idempotency_user). */
export class NotPermitted extends IdempotencyError {
  static override readonly code: string | undefined = "42501";
}

/**
 * 40001 (and 40P01): the record kept changing, or a serialization failure (a duplicate
 * under REPEATABLE READ): retry the call, or its transaction.
 */
export class Contention extends IdempotencyError {
  static override readonly code: string | undefined = "40001";
}

/**
 * The SQL API is not installed where the store looks (42883; 3F000: no such schema), or not
 * ready (55000).
 */
export class NotInstalled extends IdempotencyError {}

/**
 * The database could not be reached, or answered with an error no other class names. The
 * driver's error is the `cause`.
 */
export class StoreUnavailable extends IdempotencyError {}

export interface InProgressOptions extends IdempotencyErrorOptions {
  retryAfterMs?: number | undefined;
}

/**
 * The call is running elsewhere. Ask again after `retryAfterMs`, or give the wrapper a
 * `wait` so that a duplicate waits for the first call's result.
 */
export class InProgress extends IdempotencyError {
  readonly retryAfterMs: number | undefined;

  constructor(message: string, options: InProgressOptions = {}) {
    super(message, options);
    this.retryAfterMs = options.retryAfterMs;
  }
}

/**
 * A remembered failure is replayed (`cacheFailures: true`): the function is not run again.
 * `response` is what was stored for it (`{ error, type }` from this package, or another
 * client's).
 */
export class ToolFailed extends IdempotencyError {
  readonly response: unknown;

  constructor(message: string, options: WithResponse = {}) {
    super(message, options);
    this.response = options.response;
  }
}

export interface UnrecordedOptions extends WithResponse {
  replayed?: boolean;
}

/**
 * The function ran (its effect happened) but its result is not recorded: the store could
 * not keep it (too large, U+0000, not JSON) or could not be reached in time. `response` is
 * the result where this attempt has it; `replayed` is true when this call did not run the
 * function (a retry told of an earlier attempt whose result could not be kept).
 */
export class Unrecorded extends IdempotencyError {
  readonly response: unknown;
  readonly replayed: boolean;

  constructor(message: string, options: UnrecordedOptions = {}) {
    super(message, options);
    this.response = options.response;
    this.replayed = options.replayed ?? false;
  }
}

/**
 * A takeover found that an earlier attempt may have performed the effect, and the choice
 * (`onUnknownOutcome: "refuse"`, or a reconcile read that could not tell) is to refuse:
 * every retry gets this until an operator resolves or forgets the record.
 */
export class OutcomeUnknown extends IdempotencyError {}

type ErrorClass = new (message: string, options?: IdempotencyErrorOptions) => IdempotencyError;

/** One class per SQLSTATE the SQL API raises; anything else is StoreUnavailable. */
const BY_SQLSTATE: ReadonlyMap<string, ErrorClass> = new Map<string, ErrorClass>([
  ["22023", InvalidArgument],
  ["IK001", Mismatch],
  ["IK002", RepeatRefused],
  ["IK003", LeaseLost],
  ["IK004", ResponseTooLarge],
  ["IK005", Uncanonicalizable],
  ["IK006", GrantRoleCaller],
  ["42501", NotPermitted],
  ["40001", Contention],
  ["40P01", Contention],
  ["42883", NotInstalled],
  ["3F000", NotInstalled],
  ["55000", NotInstalled],
]);

/** The error of the class that names `sqlstate` (StoreUnavailable for any other). */
export function fromSqlstate(
  sqlstate: string | undefined,
  message: string,
  detail?: string,
  hint?: string,
  cause?: unknown,
): IdempotencyError {
  const cls = BY_SQLSTATE.get(sqlstate ?? "") ?? StoreUnavailable;
  let why = hint;
  if (cls === NotInstalled && (sqlstate === "42883" || sqlstate === "3F000") && !why) {
    why =
      "Install the SQL API in this database: CREATE EXTENSION pg_idempotency (or the " +
      "portable SQL, docs/installation.md), or name its schema: new Store(..., { schema })";
  }
  const options: IdempotencyErrorOptions = { detail, hint: why, sqlstate };
  if (cause !== undefined) options.cause = cause;
  return new cls(message, options);
}
