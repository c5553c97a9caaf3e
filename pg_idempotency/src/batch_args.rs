//! The arrays of a batch call: one element per item, all of one length.

use pgrx::pg_sys;

use crate::error::{IdemError, IdemResult};
use pg_idempotency_protocol::functions::MAX_BATCH_ITEMS;

/// The elements of a `jsonb[]` argument, as datums (never converted to Rust values, like a
/// single call's request). A multi-dimensional array is read in storage order, as
/// `unnest` reads it.
pub fn jsonb_elements(array: Option<pg_sys::Datum>) -> Option<Vec<Option<pg_sys::Datum>>> {
    let array = array?;
    let mut elements: *mut pg_sys::Datum = std::ptr::null_mut();
    let mut nulls: *mut bool = std::ptr::null_mut();
    let mut n: std::ffi::c_int = 0;
    // SAFETY: `array` is the non-NULL datum of an argument declared jsonb[]; detoasting
    // gives an ArrayType in the call's memory context. deconstruct_array is told jsonb's
    // layout (varlena, by reference, int-aligned) and fills palloc'd arrays of n datums and
    // n null flags, which live as long as the call.
    unsafe {
        let detoasted = pg_sys::pg_detoast_datum(array.cast_mut_ptr()).cast::<pg_sys::ArrayType>();
        pg_sys::deconstruct_array(
            detoasted,
            pg_sys::JSONBOID,
            -1,
            false,
            pg_sys::TYPALIGN_INT as std::ffi::c_char,
            &mut elements,
            &mut nulls,
            &mut n,
        );
        let n = n.max(0) as usize;
        Some(
            (0..n)
                .map(|i| (!*nulls.add(i)).then(|| *elements.add(i)))
                .collect(),
        )
    }
}

/// How many items a batch has: the length every array given must have.
/// `none` is what an error says when no array is given: its message, and what the items
/// come from.
pub fn item_count(
    function: &str,
    lengths: &[(&str, Option<usize>)],
    none: (&str, &str),
) -> IdemResult<usize> {
    let given: Vec<(&str, usize)> = lengths
        .iter()
        .filter_map(|(name, len)| len.map(|l| (*name, l)))
        .collect();
    let Some(&(_, n)) = given.first() else {
        return Err(IdemError::invalid(
            none.0,
            format!("{function} takes its items from {}.", none.1),
            format!("Pass {}.", none.1),
        ));
    };
    if let Some((name, len)) = given.iter().find(|(_, l)| *l != n) {
        return Err(IdemError::invalid(
            "the arrays of a batch must have one length",
            format!(
                "{} has {n} elements and {name} {len}; element i of each is item i.",
                given[0].0
            ),
            "Pass one element per item in every array (NULL where an item has none).",
        ));
    }
    if n > MAX_BATCH_ITEMS {
        return Err(IdemError::invalid(
            "too many items in one batch",
            format!("The batch has {n} items; one call takes at most {MAX_BATCH_ITEMS}."),
            format!("Split it into batches of at most {MAX_BATCH_ITEMS} items."),
        ));
    }
    Ok(n)
}

/// An item's own argument error, with the item named in its detail.
pub fn at_item(item: usize, mut err: IdemError) -> IdemError {
    err.detail = format!("Item {item} of the batch: {}", err.detail);
    err
}
