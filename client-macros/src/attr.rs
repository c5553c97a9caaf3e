//! The attribute's members, read and checked: `#[tool(name = "..", description = "..",
//! idempotent(strategy = .., ttl_secs = .., on_cache_hit = .., cache_failures, ..),
//! required, read_only)]`. Everything wrong is an error at its own span.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::{Ident, LitBool, LitInt, LitStr, Path, Token};

/// `#[tool(..)]`.
#[derive(Default)]
pub struct ToolAttr {
    pub name: Option<LitStr>,
    pub description: Option<LitStr>,
    pub idempotent: Option<IdempotentAttr>,
    /// The Java framework's `idempotencyHint = REQUIRED`.
    pub required: Option<Span>,
    /// No side effect (a read): nothing to protect.
    pub read_only: Option<Span>,
    /// Where the client crate is, for a crate that depends on it under another name
    /// (`crate = "idempotency"`, as serde's `#[serde(crate = "..")]`).
    pub krate: Option<Path>,
}

/// `idempotent(..)`: the Java framework's `@Idempotent` members, and the client's own.
#[derive(Default)]
pub struct IdempotentAttr {
    pub span: Option<Span>,
    pub strategy: Option<Ident>,
    /// The tool's own key supplier, a function of its typed input (implies Explicit).
    pub key: Option<Path>,
    pub ttl_secs: Option<(u64, Span)>,
    pub on_cache_hit: Option<Ident>,
    pub cache_failures: Option<bool>,
    pub on_mismatch: Option<Ident>,
    pub lease_secs: Option<u64>,
    pub timeout_secs: Option<u64>,
    pub wait_secs: Option<u64>,
}

pub const STRATEGIES: [&str; 4] = ["hash_input", "explicit", "uuid", "none"];

const TOOL_MEMBERS: &str = "name, description, idempotent, required, read_only, crate";
const IDEMPOTENT_MEMBERS: &str = "strategy, key, ttl_secs, on_cache_hit, cache_failures, on_mismatch, lease_secs, timeout_secs, wait_secs";

impl ToolAttr {
    pub fn parse(tokens: TokenStream) -> syn::Result<ToolAttr> {
        let mut attr = ToolAttr::default();
        let parser = syn::meta::parser(|meta| attr.member(meta));
        syn::parse::Parser::parse2(parser, tokens)?;
        Ok(attr)
    }

    fn member(&mut self, meta: ParseNestedMeta) -> syn::Result<()> {
        let span = meta
            .path
            .get_ident()
            .map_or_else(Span::call_site, Ident::span);
        let name = member_name(&meta)?;
        match name.as_str() {
            "name" => set(&mut self.name, meta.value()?.parse()?, span, "name"),
            "description" => set(
                &mut self.description,
                meta.value()?.parse()?,
                span,
                "description",
            ),
            "required" => set(&mut self.required, span, span, "required"),
            "read_only" => set(&mut self.read_only, span, span, "read_only"),
            "crate" => {
                let path: LitStr = meta.value()?.parse()?;
                set(&mut self.krate, path.parse()?, span, "crate")
            }
            "idempotent" => {
                let mut idem = IdempotentAttr {
                    span: Some(span),
                    ..IdempotentAttr::default()
                };
                // Bare `idempotent` is `@Idempotent` with every member at its default.
                if meta.input.peek(syn::token::Paren) {
                    meta.parse_nested_meta(|m| idem.member(m))?;
                }
                set(&mut self.idempotent, idem, span, "idempotent")
            }
            "ttl_secs" | "strategy" | "on_cache_hit" | "cache_failures" | "key" => Err(meta.error(
                format!("`{name}` is a member of `idempotent`: write `idempotent({name} = ..)`"),
            )),
            other => Err(meta.error(format!(
                "unknown member `{other}` of #[tool]: expected one of {TOOL_MEMBERS}"
            ))),
        }
    }
}

impl IdempotentAttr {
    fn member(&mut self, meta: ParseNestedMeta) -> syn::Result<()> {
        let span = meta
            .path
            .get_ident()
            .map_or_else(Span::call_site, Ident::span);
        let name = member_name(&meta)?;
        match name.as_str() {
            "strategy" => {
                let word: Ident = meta.value()?.parse()?;
                if !STRATEGIES.contains(&word.to_string().as_str()) {
                    return Err(syn::Error::new(
                        word.span(),
                        format!(
                            "unknown strategy `{word}`: expected one of {}",
                            STRATEGIES.join(", ")
                        ),
                    ));
                }
                set(&mut self.strategy, word, span, "strategy")
            }
            "key" => set(&mut self.key, meta.value()?.parse()?, span, "key"),
            "ttl_secs" => {
                let lit: LitInt = meta.value()?.parse()?;
                set(
                    &mut self.ttl_secs,
                    (lit.base10_parse()?, lit.span()),
                    span,
                    "ttl_secs",
                )
            }
            "on_cache_hit" => {
                let word: Ident = meta.value()?.parse()?;
                word_of::<pg_idempotency_protocol::OnCacheHit>(
                    &word,
                    pg_idempotency_protocol::OnCacheHit::parse,
                    pg_idempotency_protocol::OnCacheHit::listed,
                )?;
                set(&mut self.on_cache_hit, word, span, "on_cache_hit")
            }
            "on_mismatch" => {
                let word: Ident = meta.value()?.parse()?;
                word_of::<pg_idempotency_protocol::OnMismatch>(
                    &word,
                    pg_idempotency_protocol::OnMismatch::parse,
                    pg_idempotency_protocol::OnMismatch::listed,
                )?;
                set(&mut self.on_mismatch, word, span, "on_mismatch")
            }
            "cache_failures" => {
                // Bare `cache_failures` is `cacheFailures = true`.
                let on = if meta.input.peek(Token![=]) {
                    meta.value()?.parse::<LitBool>()?.value
                } else {
                    true
                };
                set(&mut self.cache_failures, on, span, "cache_failures")
            }
            "lease_secs" => set(&mut self.lease_secs, secs(&meta)?, span, "lease_secs"),
            "timeout_secs" => set(&mut self.timeout_secs, secs(&meta)?, span, "timeout_secs"),
            "wait_secs" => set(&mut self.wait_secs, secs(&meta)?, span, "wait_secs"),
            "ttl" | "ttl_seconds" | "ttlSeconds" => Err(meta.error(format!(
                "unknown member `{name}` of idempotent: the ttl is `ttl_secs = <seconds>`"
            ))),
            other => Err(meta.error(format!(
                "unknown member `{other}` of idempotent: expected one of {IDEMPOTENT_MEMBERS}"
            ))),
        }
    }
}

fn member_name(meta: &ParseNestedMeta) -> syn::Result<String> {
    meta.path
        .get_ident()
        .map(Ident::to_string)
        .ok_or_else(|| meta.error("expected a member name"))
}

/// Each member once: a second would silently win over the first.
fn set<T>(slot: &mut Option<T>, value: T, span: Span, name: &str) -> syn::Result<()> {
    if slot.is_some() {
        return Err(syn::Error::new(span, format!("`{name}` is given twice")));
    }
    *slot = Some(value);
    Ok(())
}

fn secs(meta: &ParseNestedMeta) -> syn::Result<u64> {
    meta.value()?.parse::<LitInt>()?.base10_parse()
}

/// A policy word, checked against the SQL API's own list of them.
fn word_of<W>(
    word: &Ident,
    parse: fn(&str) -> Option<W>,
    listed: fn() -> String,
) -> syn::Result<W> {
    parse(&word.to_string()).ok_or_else(|| {
        syn::Error::new(
            word.span(),
            format!("unknown word `{word}`: expected one of {}", listed()),
        )
    })
}
