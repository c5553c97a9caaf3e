//! Rust internals, run inside the server by `cargo pgrx test`.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    #[pg_test]
    fn the_api_is_installed() {
        let n = Spi::get_one::<i64>(
            "SELECT count(*) FROM pg_proc WHERE proname LIKE 'idem\\_%' AND prosecdef",
        );
        assert_eq!(n, Ok(Some(6)));
    }
}
