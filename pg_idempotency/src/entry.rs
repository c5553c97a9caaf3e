//! The glue between PostgreSQL's function-call interface and our Rust code.
//!
//! Each SQL function is a plain V1 C function whose body runs under pgrx's guard (panics and
//! PostgreSQL errors are reported as usual) and returns `IdemResult`; our own errors are
//! raised afterwards, from this outermost frame, so that they keep their SQLSTATE.

use pgrx::pg_sys;
use pgrx::FromDatum;

use crate::error::{self, IdemResult};

/// The arguments of one call.
pub struct Args(pub pg_sys::FunctionCallInfo);

impl Args {
    pub fn get<T: FromDatum>(&self, n: usize) -> Option<T> {
        unsafe { pgrx::fcinfo::pg_getarg::<T>(self.0, n) }
    }

    /// The argument's datum as given (for jsonb, which we never convert to a Rust value).
    pub fn datum(&self, n: usize) -> Option<pg_sys::Datum> {
        unsafe { pgrx::fcinfo::pg_getarg_datum(self.0, n) }
    }
}

pub type Body = fn(&Args) -> IdemResult<pg_sys::Datum>;

/// Runs `body` for one call and raises its error, if any, with our SQLSTATE.
///
/// # Safety
/// Only for PostgreSQL's function manager to call, with a valid `fcinfo`.
pub unsafe fn call(
    fcinfo: pg_sys::FunctionCallInfo,
    body: Body,
    function: &'static std::ffi::CStr,
) -> pg_sys::Datum {
    let result = unsafe { pg_sys::panic::pgrx_extern_c_guard(|| body(&Args(fcinfo))) };
    match result {
        Ok(datum) => datum,
        Err(err) => unsafe { error::raise(err, function) },
    }
}

/// Declares a SQL-callable V1 function `$symbol` whose work is done by `$body`.
macro_rules! sql_function {
    ($symbol:ident, $finfo:ident, $body:path) => {
        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub extern "C" fn $finfo() -> &'static ::pgrx::pg_sys::Pg_finfo_record {
            const V1: ::pgrx::pg_sys::Pg_finfo_record =
                ::pgrx::pg_sys::Pg_finfo_record { api_version: 1 };
            &V1
        }

        #[unsafe(no_mangle)]
        #[doc(hidden)]
        pub unsafe extern "C-unwind" fn $symbol(
            fcinfo: ::pgrx::pg_sys::FunctionCallInfo,
        ) -> ::pgrx::pg_sys::Datum {
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
unsafe fn result_tupdesc(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::TupleDesc {
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

/// How many columns the function's result row has (a result type may gain columns in an
/// update of the extension, while the library serves the older one until the update runs).
pub fn result_columns(args: &Args) -> usize {
    unsafe { (*result_tupdesc(args.0)).natts as usize }
}

/// How many arguments the call passed (a function may gain arguments in an update).
pub fn arg_count(args: &Args) -> usize {
    unsafe { (*args.0).nargs as usize }
}

/// SQL NULL as the function's result.
pub fn null(args: &Args) -> pg_sys::Datum {
    unsafe { (*args.0).isnull = true };
    pg_sys::Datum::from(0usize)
}

/// A single-row composite result (functions declared with OUT parameters).
pub fn composite(args: &Args, columns: &[Column]) -> pg_sys::Datum {
    unsafe {
        let tupdesc = result_tupdesc(args.0);
        let (mut values, mut nulls) = split(columns);
        let tuple = pg_sys::heap_form_tuple(tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::HeapTupleHeaderGetDatum((*tuple).t_data)
    }
}

/// A set-returning result of zero or more rows (functions declared `RETURNS TABLE`).
pub fn rows(args: &Args, rows: &[Vec<Column>]) -> pg_sys::Datum {
    unsafe {
        pg_sys::InitMaterializedSRF(args.0, 0);
        let rsinfo = (*args.0).resultinfo.cast::<pg_sys::ReturnSetInfo>();
        for row in rows {
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
