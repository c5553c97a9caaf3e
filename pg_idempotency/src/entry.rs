//! The glue between PostgreSQL's function-call interface and our Rust code.
//!
//! Each SQL function is a plain V1 C function whose body runs under pgrx's guard (panics and
//! PostgreSQL errors are reported as usual) and returns `IdemResult`; our own errors are
//! raised afterwards, from this outermost frame, so that they keep their SQLSTATE.

use pgrx::pg_sys;
use pgrx::FromDatum;

use crate::error::{self, IdemResult};

/// The arguments of one call. Only [`call`] makes one, from the `fcinfo` that the function
/// manager passed for the running call: that is what lets the safe functions of this module
/// dereference it.
pub struct Args(pg_sys::FunctionCallInfo);

impl Args {
    /// Argument `n` as a `T`, which must be the Rust form of the type that the function's
    /// SQL declaration gives that argument: only the structs generated from those
    /// declarations (`call_args`) call this. An argument beyond those the call passed reads
    /// as NULL (a function may gain arguments in an update; the schemas this library serves
    /// all declare today's).
    pub fn get<T: FromDatum>(&self, n: usize) -> Option<T> {
        if n >= self.count() {
            return None;
        }
        // SAFETY: self.0 is the fcinfo of the running call (see `Args`) and `n` is below its
        // nargs. That the datum is a `T` holds because the caller is generated from the same
        // declaration as the function's SQL (see build.rs).
        unsafe { pgrx::fcinfo::pg_getarg::<T>(self.0, n) }
    }

    /// The argument's datum as given (for jsonb, which we never convert to a Rust value).
    pub fn datum(&self, n: usize) -> Option<pg_sys::Datum> {
        if n >= self.count() {
            return None;
        }
        // SAFETY: self.0 is the fcinfo of the running call and `n` is below its nargs; the
        // datum is returned as it is, without being interpreted here.
        unsafe { pgrx::fcinfo::pg_getarg_datum(self.0, n) }
    }

    /// How many arguments the call passed (a function may gain arguments in an update).
    pub fn count(&self) -> usize {
        // SAFETY: self.0 is the fcinfo of the running call (see `Args`).
        unsafe { (*self.0).nargs as usize }
    }
}

pub type Body = fn(&Args) -> IdemResult<pg_sys::Datum>;

/// Runs `body` for one call and raises its error, if any, with our SQLSTATE.
///
/// # Safety
/// `fcinfo` must be the one PostgreSQL's function manager passed to the calling V1 function
/// for this call, and this must be that function's outermost Rust frame: nothing above it
/// may hold a value with a destructor, since an error longjmps over it.
pub unsafe fn call(
    fcinfo: pg_sys::FunctionCallInfo,
    body: Body,
    function: &'static std::ffi::CStr,
) -> pg_sys::Datum {
    // SAFETY: by this function's contract the frames above are PostgreSQL's and the
    // trivially-deallocated wrapper of `sql_function!`, as pgrx_extern_c_guard requires;
    // inside it, panics and PostgreSQL errors unwind the body's Rust frames normally.
    let result = unsafe {
        pg_sys::panic::pgrx_extern_c_guard(|| {
            // Every call, even one that reads no table, first checks that this library
            // serves the database's schema.
            crate::relations::check_served(function.to_str().unwrap_or("pg_idempotency"));
            body(&Args(fcinfo))
        })
    };
    match result {
        Ok(datum) => datum,
        // SAFETY: every value of the body was dropped when the guard returned, and `err` is
        // moved into `raise`: no frame it longjmps over has a destructor left to run.
        Err(err) => unsafe { error::raise(err, function) },
    }
}

/// Declares a SQL-callable V1 function `$symbol` whose work is done by `$body`.
macro_rules! sql_function {
    ($symbol:ident, $finfo:ident, $body:path) => {
        // SAFETY (no_mangle, both symbols): the names are those the SQL declarations give
        // (`AS 'MODULE_PATHNAME', 'idem_...'` and PostgreSQL's `pg_finfo_` prefix for them),
        // each declared once, so they clash with nothing else in the process.
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static ::pgrx::pg_sys::Pg_finfo_record {
            const V1: ::pgrx::pg_sys::Pg_finfo_record =
                ::pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }

        /// # Safety
        /// Only for PostgreSQL's function manager, with the `fcinfo` of this call.
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub unsafe extern "C-unwind" fn $symbol(
            fcinfo: ::pgrx::pg_sys::FunctionCallInfo,
        ) -> ::pgrx::pg_sys::Datum {
            // SAFETY: fcinfo is the function manager's for this call (this function's
            // contract) and this frame holds nothing with a destructor. The name is a Rust
            // identifier, which has no NUL, followed by the one NUL that concat! adds.
            unsafe {
                $crate::entry::call(
                    fcinfo,
                    $body,
                    ::std::ffi::CStr::from_bytes_with_nul_unchecked(
                        concat!(stringify!($symbol), "\0").as_bytes(),
                    ),
                )
            }
        }
    };
}
pub(crate) use sql_function;

/// One output column: its datum, or None for SQL NULL.
pub type Column = Option<pg_sys::Datum>;

thread_local! {
    /// Blessed result row types by function OID, for the backend's life: a function's result
    /// type cannot change without a new function (and so a new OID).
    static RESULT_TYPES: std::cell::RefCell<std::collections::HashMap<pg_sys::Oid, usize>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// The blessed result row type of the function being called.
///
/// # Safety
/// `fcinfo` must be the running call's. The descriptor returned lives in TopMemoryContext,
/// for the backend's life.
unsafe fn result_tupdesc(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::TupleDesc {
    // SAFETY: the function manager sets flinfo for every call. The copy is made and blessed
    // in TopMemoryContext so that it outlives the call and can be cached; the previous
    // context is restored on both paths out (an error raised inside PostgreSQL leaves that
    // to error recovery, which resets CurrentMemoryContext).
    unsafe {
        let fn_oid = (*(*fcinfo).flinfo).fn_oid;
        if let Some(d) = RESULT_TYPES.with(|m| m.borrow().get(&fn_oid).copied()) {
            return d as pg_sys::TupleDesc;
        }
        let old = pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
        let mut tupdesc: pg_sys::TupleDesc = std::ptr::null_mut();
        let kind = pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut tupdesc);
        if kind != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE {
            pg_sys::MemoryContextSwitchTo(old);
            pgrx::error!("pg_idempotency: function must return a composite type");
        }
        // get_call_result_type may hand out a descriptor it does not own: keep a copy.
        let blessed = pg_sys::BlessTupleDesc(pg_sys::CreateTupleDescCopy(tupdesc));
        pg_sys::MemoryContextSwitchTo(old);
        RESULT_TYPES.with(|m| m.borrow_mut().insert(fn_oid, blessed as usize));
        blessed
    }
}

/// Refuses a row with fewer columns than its descriptor: PostgreSQL's tuple builders would
/// read past the end of its values (more columns are allowed: the extra ones are not read).
fn enough_columns(given: usize, natts: i32) {
    if given < natts.max(0) as usize {
        pgrx::error!("pg_idempotency: result row has {given} columns, its type {natts}");
    }
}

/// Datums and null flags, as PostgreSQL's tuple builders take them.
fn split(columns: &[Column]) -> (Vec<pg_sys::Datum>, Vec<bool>) {
    columns
        .iter()
        .map(|c| match c {
            Some(d) => (*d, false),
            None => (pg_sys::Datum::from(0usize), true),
        })
        .unzip()
}

/// SQL NULL as the function's result.
pub fn null(args: &Args) -> pg_sys::Datum {
    // SAFETY: args.0 is the running call's fcinfo, which the function manager owns for the
    // call; setting isnull is how a V1 function returns NULL (PG_RETURN_NULL).
    unsafe { (*args.0).isnull = true };
    pg_sys::Datum::from(0usize)
}

/// A single-row composite result (functions declared with OUT parameters).
pub fn composite(args: &Args, columns: &[Column]) -> pg_sys::Datum {
    // SAFETY: tupdesc is the blessed descriptor of this call's result type (args.0 is the
    // running call's fcinfo). heap_form_tuple reads natts values and null flags: the check
    // below keeps it inside the two vectors. The tuple is palloc'd in the current memory
    // context (the call's), which outlives the return of its datum to the executor.
    unsafe {
        let tupdesc = result_tupdesc(args.0);
        enough_columns(columns.len(), (*tupdesc).natts);
        let (mut values, mut nulls) = split(columns);
        let tuple = pg_sys::heap_form_tuple(tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data)
    }
}

/// A set-returning result of zero or more rows (functions declared `RETURNS TABLE`).
pub fn rows(args: &Args, rows: &[Vec<Column>]) -> pg_sys::Datum {
    // SAFETY: args.0 is the running call's fcinfo. InitMaterializedSRF raises an error unless
    // resultinfo is a ReturnSetInfo that accepts a materialized set, and fills its setResult
    // and setDesc in the query's memory context, where they outlive this call.
    // tuplestore_putvalues copies each row into the tuplestore, reading setDesc's natts
    // values and null flags: the check keeps it inside the row's vectors.
    unsafe {
        pg_sys::InitMaterializedSRF(args.0, 0);
        let rsinfo = (*args.0).resultinfo.cast::<pg_sys::ReturnSetInfo>();
        for row in rows {
            enough_columns(row.len(), (*(*rsinfo).setDesc).natts);
            let (mut values, mut nulls) = split(row);
            pg_sys::tuplestore_putvalues(
                (*rsinfo).setResult,
                (*rsinfo).setDesc,
                values.as_mut_ptr(),
                nulls.as_mut_ptr(),
            );
        }
        pg_sys::Datum::from(0usize)
    }
}

/// The body of a C symbol that only a schema outside the window binds (0.1.0's
/// `_idem_counters`). The symbol stays so that the release's script still installs, on
/// the way to the update; `call` refuses such a schema before any body runs.
pub fn outside_window(_a: &Args) -> crate::error::IdemResult<pg_sys::Datum> {
    pgrx::error!("pg_idempotency: this function belongs to a schema this library no longer serves")
}
