/** The records of web actions' calls, as plain SQL shows them. */

import { one, until } from "./db.js";

/** The record as idem_lookup shows it, every column, as JSON. */
export async function webRecord(scope: string, key: string): Promise<Record<string, unknown> | undefined> {
  const row = await one<{ r: Record<string, unknown> }>("SELECT to_jsonb(l) AS r FROM idem_lookup($1, $2) l", [scope, key]);
  return row?.r;
}

/** Until the record's lease has lapsed, as the server's clock says (its holder stopped
 * beating). A record that is gone fails: the claim was released, not left. */
export async function untilLapsed(scope: string, key: string): Promise<void> {
  await until(async () => {
    const row = await one<{ lapsed: boolean }>(
      "SELECT lease_until <= clock_timestamp() AS lapsed FROM idem_lookup($1, $2)",
      [scope, key],
    );
    if (row === undefined) throw new Error(`the record ${scope}/${key} is gone: the claim was released, not left`);
    return row.lapsed;
  }, `the lease of ${scope}/${key} lapsing`);
}

/** The key of a call with a JSON body, as the server derives it from what names the call:
 * its method, URL and body (never its headers). */
export async function inputKey(method: string, url: string, json: unknown): Promise<string> {
  const row = await one<{ key: string }>("SELECT encode(idem_hash($1::jsonb), 'hex') AS key", [
    JSON.stringify({ method, url, json }),
  ]);
  return row?.key ?? "";
}

let paths = 0;

/** A path no other test uses (so its scope, the method and URL, is new too). */
export function newPath(name: string): string {
  paths += 1;
  return `/${name}-${process.pid}-${Date.now().toString(36)}-${paths}`;
}
