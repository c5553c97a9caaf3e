//! Every object an install of the SQL API owns, as sorted lines: two installs are the same
//! when their lines are (an upgraded one and a fresh one, a migration tool's and psql's).

use crate::Client;

/// Every object an install owns, one sorted line each with what defines it: functions
/// (definition, privileges, comment), tables, columns, constraints, indexes, types,
/// sequences, the storage schema, and the extension's members and dump configuration.
/// $1 is the API schema (its idem_* functions), $2 the storage schema.
const DESCRIBE: &str = r#"
WITH ours AS (SELECT oid FROM pg_namespace WHERE nspname = $2),
ext AS (SELECT oid, extconfig, extcondition FROM pg_extension WHERE extname = 'pg_idempotency')
SELECT line FROM (
    SELECT 'function ' || p.oid::regprocedure || E'\n' || pg_get_functiondef(p.oid)
           || ' acl ' || coalesce(p.proacl::text, '-')
           || ' comment ' || coalesce(obj_description(p.oid, 'pg_proc'), '-')
    FROM pg_proc p
    WHERE p.pronamespace IN (SELECT oid FROM ours)
       OR (p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)
           AND p.proname LIKE 'idem\_%')
    UNION ALL
    SELECT 'relation ' || c.oid::regclass || ' ' || c.relkind::text
           || ' options ' || coalesce(c.reloptions::text, '-')
           || ' acl ' || coalesce(c.relacl::text, '-')
           || ' comment ' || coalesce(obj_description(c.oid, 'pg_class'), '-')
    FROM pg_class c WHERE c.relnamespace IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'column ' || a.attrelid::regclass || '.' || a.attname || ' '
           || format_type(a.atttypid, a.atttypmod) || ' not null ' || a.attnotnull
           || ' default ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '-')
    FROM pg_attribute a
    JOIN pg_class c ON c.oid = a.attrelid
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE c.relnamespace IN (SELECT oid FROM ours) AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL
    SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
    FROM pg_constraint WHERE connamespace IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'index ' || pg_get_indexdef(i.indexrelid)
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
    WHERE c.relnamespace IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'type ' || t.oid::regtype || ' ' || t.typtype::text
    FROM pg_type t WHERE t.typnamespace IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'sequence ' || s.seqrelid::regclass || ' ' || format_type(s.seqtypid, NULL)
           || ' start ' || s.seqstart || ' by ' || s.seqincrement || ' min ' || s.seqmin
           || ' max ' || s.seqmax || ' cache ' || s.seqcache || ' cycle ' || s.seqcycle
    FROM pg_sequence s JOIN pg_class c ON c.oid = s.seqrelid
    WHERE c.relnamespace IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'schema ' || n.nspname || ' acl ' || coalesce(n.nspacl::text, '-')
           || ' comment ' || coalesce(obj_description(n.oid, 'pg_namespace'), '-')
    FROM pg_namespace n WHERE n.oid IN (SELECT oid FROM ours)
    UNION ALL
    SELECT 'member ' || pg_describe_object(d.classid, d.objid, d.objsubid)
    FROM pg_depend d, ext
    WHERE d.refclassid = 'pg_extension'::regclass AND d.refobjid = ext.oid AND d.deptype = 'e'
    UNION ALL
    SELECT 'dumped ' || coalesce(extconfig::regclass[]::text, '-') || ' '
           || coalesce(extcondition::text, '-')
    FROM ext
) lines(line)
ORDER BY line
"#;

/// The lines of the install whose API is in schema `api` and storage in `storage`.
pub fn describe(c: &mut Client, api: &str, storage: &str) -> Vec<String> {
    c.query(DESCRIBE, &[&api, &storage])
        .unwrap_or_else(|e| panic!("describing the install: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Our functions: the members of the extension pg_idempotency (where it is installed) and
/// every other function of the schemas $1 that belongs to no extension (the portable
/// variant's, the PL/Proxy layer's).
const OURS: &str = r#"
WITH ours AS (
    SELECT d.objid AS oid FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid
    WHERE e.extname = 'pg_idempotency' AND d.classid = 'pg_proc'::regclass
      AND d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
    UNION
    SELECT p.oid FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
    WHERE n.nspname = ANY ($1)
      AND NOT EXISTS (SELECT FROM pg_depend d
                      WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid
                        AND d.deptype = 'e')
)"#;

/// Of ours, those PUBLIC may execute: a NULL proacl is the default, which grants it.
const BY_PUBLIC: &str = r#"
SELECT p.oid::regprocedure::text FROM ours JOIN pg_proc p USING (oid)
WHERE p.proacl IS NULL
   OR EXISTS (SELECT FROM aclexplode(p.proacl) a
              WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
ORDER BY 1"#;

/// Our functions PUBLIC may execute (see OURS), sorted, and how many functions of ours
/// there are (so a check cannot pass by finding none).
pub fn executable_by_public(c: &mut Client, schemas: &[&str]) -> (Vec<String>, i64) {
    let schemas: Vec<String> = schemas.iter().map(|s| s.to_string()).collect();
    let public = c
        .query(&format!("{OURS}{BY_PUBLIC}"), &[&schemas])
        .unwrap_or_else(|e| panic!("our functions executable by PUBLIC: {e}"));
    let ours: i64 = c
        .query_one(&format!("{OURS} SELECT count(*) FROM ours"), &[&schemas])
        .map(|r| r.get(0))
        .unwrap_or_else(|e| panic!("counting our functions: {e}"));
    (public.iter().map(|r| r.get(0)).collect(), ours)
}
