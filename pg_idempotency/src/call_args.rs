//! The arguments of each C function, by name and type, as build.rs generates them from the
//! one declaration of the SQL API (protocol/src/functions.rs): `BeginArgs::read(args)`
//! gives `scope`, `key`, ... `claim_token`, each an `Option` (SQL NULL is None).

include!(concat!(env!("OUT_DIR"), "/call_args.rs"));
