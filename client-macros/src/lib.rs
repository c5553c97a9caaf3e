//! `#[tool]`: the Java framework's `@Tool` and `@Idempotent` on one async function. Re-exported
//! by the client as `pg_idempotency_client::tool`; see its documentation there.

use proc_macro::TokenStream;

mod attr;
mod expand;

/// Makes an async function a tool: the function stays as written, and `<name>_tool()`
/// returns its `ToolSpec` (name, description, input schema, settings) for
/// `Dispatcher::register`.
///
/// ```ignore
/// /// Send an email.
/// #[pg_idempotency_client::tool(idempotent(ttl_secs = 86_400), required)]
/// async fn send_email(input: SendEmail, ctx: CallContext) -> Result<Sent, MyError> { .. }
///
/// dispatcher.register(send_email_tool())?;
/// ```
///
/// Members: `name = ".."` (the function's name by default), `description = ".."` (the doc
/// comment by default; one of the two is required), `idempotent` or `idempotent(..)` (the
/// framework's `@Idempotent`: `strategy = hash_input | explicit | uuid | none`, `key =
/// path` (an Explicit tool's own key supplier, a function of `&Input`), `ttl_secs = n`,
/// `on_cache_hit = return_cached | return_cached_if_success | fail_fast`,
/// `cache_failures` or `cache_failures = bool`, and the client's `on_mismatch = reject |
/// ignore`, `lease_secs`, `timeout_secs`, `wait_secs`), `required` (the Java framework's
/// `idempotencyHint = REQUIRED`), `read_only` (no side effect).
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let func = syn::parse_macro_input!(item as syn::ItemFn);
    let expanded = attr::ToolAttr::parse(attr.into()).and_then(|attr| expand::expand(attr, &func));
    match expanded {
        Ok(tokens) => tokens.into(),
        // The function is kept, so that the one error is all the user sees, not also every
        // call of a function that vanished.
        Err(e) => {
            let e = e.to_compile_error();
            quote::quote! { #e #func }.into()
        }
    }
}
