//! From the function and its attribute to the function, unchanged, and `<name>_tool()`, which
//! returns its `ToolSpec`. The function stays callable as written (a test calls it
//! directly); the tool only wraps it.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, ReturnType, Type};

use crate::attr::{IdempotentAttr, ToolAttr};

pub fn expand(attr: ToolAttr, func: &ItemFn) -> syn::Result<TokenStream> {
    // The client crate, by the path the user named (`crate = ".."`) or its own name.
    let krate = match &attr.krate {
        Some(path) => quote! { #path },
        None => quote! { ::pg_idempotency_client },
    };
    let sig = &func.sig;
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span(),
            "a tool is an `async fn`: write `async fn` (a blocking tool would hold up the dispatcher's tasks)",
        ));
    }
    if !sig.generics.params.is_empty() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "a tool's function takes no generic parameters: its input's schema comes from its one input type",
        ));
    }
    let params = params(func)?;
    let ReturnType::Type(_, output_ty) = &sig.output else {
        return Err(syn::Error::new(
            sig.ident.span(),
            "a tool returns `Result<O, E>` (O: serde::Serialize, E: any error): write `-> Result<..>`",
        ));
    };
    let (input_ty, ctx_ty) = (params.input, params.ctx);

    let fn_ident = &sig.ident;
    let name = match &attr.name {
        Some(name) => name.value(),
        None => fn_ident.to_string().trim_start_matches("r#").to_string(),
    };
    let description = match &attr.description {
        Some(d) => d.value(),
        None => doc_comment(func).ok_or_else(|| {
            syn::Error::new(
                sig.ident.span(),
                "a tool needs a description, which is what an agent is shown of it: `description = \"..\"` in #[tool], or a doc comment",
            )
        })?,
    };
    if let (Some(read_only), Some(_)) = (attr.read_only, attr.required) {
        return Err(syn::Error::new(
            read_only,
            "a read_only tool has no side effect to protect, and `required` says it has one: keep one of them",
        ));
    }
    let idempotent = match &attr.idempotent {
        Some(idem) => idempotent(idem, input_ty, attr.required.is_some(), &krate)?,
        None => quote! {},
    };
    let required = attr
        .required
        .map(|span| quote_spanned! {span=> .required() });
    let read_only = attr
        .read_only
        .map(|span| quote_spanned! {span=> .side_effect(false) });

    // Checked here, at the user's own types, so that a wrong one is named where it is
    // written rather than inside `ToolSpec::typed`'s bounds.
    let input_check = quote_spanned! {input_ty.span()=>
        #krate::__private::is_tool_input::<#input_ty>();
    };
    let ctx_check = ctx_ty.map(|ty| {
        quote_spanned! {ty.span()=>
            #krate::__private::is_call_context::<#ty>();
        }
    });

    let output_check = quote_spanned! {output_ty.span()=>
        #krate::__private::is_tool_result::<#output_ty>();
    };

    let vis = &func.vis;
    let ctor = format_ident!("{}_tool", fn_ident.to_string().trim_start_matches("r#"));
    let doc = format!(
        "The tool `{name}` ({description}), ready for `Dispatcher::register`: [`{fn_ident}`] with its description, input schema and settings."
    );
    // A function without shared state is the tool itself; one with it is called with a
    // clone of the state each time, by a closure that owns it.
    let (shared_param, tool) = match params.shared {
        None => (quote! {}, quote! { #fn_ident }),
        Some(shared_ty) => {
            let ctx = ctx_ty.map(|_| quote! { , ctx });
            let ctx_param = ctx_ty.map(|ty| quote! { , ctx: #ty });
            (
                quote! { shared: #shared_ty },
                quote! {
                    move |input: #input_ty #ctx_param| {
                        #fn_ident(#krate::Shared(::std::clone::Clone::clone(&shared)), input #ctx)
                    }
                },
            )
        }
    };
    Ok(quote! {
        #func

        #[doc = #doc]
        #vis fn #ctor(#shared_param) -> #krate::ToolSpec {
            #input_check
            #ctx_check
            #output_check
            #krate::ToolSpec::typed(#name, #tool)
                .description(#description)
                #idempotent
                #required
                #read_only
        }
    })
}

/// What the function takes: its shared state (the `T` of a first `Shared<T>`: a pool, a
/// client), its input, and its call's context.
struct Params<'f> {
    shared: Option<&'f Type>,
    input: &'f Type,
    ctx: Option<&'f Type>,
}

fn params(func: &ItemFn) -> syn::Result<Params<'_>> {
    let mut types = Vec::new();
    for arg in &func.sig.inputs {
        match arg {
            FnArg::Receiver(r) => {
                return Err(syn::Error::new(
                    r.span(),
                    "a tool is a free function, not a method: take what it needs as its first parameter, `Shared(pool): Shared<Pool>`, and `<name>_tool(pool)` builds it",
                ))
            }
            FnArg::Typed(t) => types.push(&*t.ty),
        }
    }
    let (shared, rest) = match types.split_first() {
        Some((first, rest)) if shared_of(first).is_some() => (shared_of(first), rest),
        _ => (None, types.as_slice()),
    };
    match rest {
        [input] => Ok(Params { shared, input, ctx: None }),
        [input, ctx] => Ok(Params { shared, input, ctx: Some(ctx) }),
        _ => Err(syn::Error::new(
            func.sig.ident.span(),
            "a tool takes its input, and may take its shared state before it and its call's context after it: `async fn name(Shared(s): Shared<S>, input: Input, ctx: CallContext)`, each but the input optional",
        )),
    }
}

/// `T` of a type written `Shared<T>` (the client's `pg_idempotency_client::Shared`).
fn shared_of(ty: &Type) -> Option<&Type> {
    let Type::Path(path) = ty else { return None };
    let last = path.path.segments.last()?;
    if last.ident != "Shared" {
        return None;
    }
    match &last.arguments {
        syn::PathArguments::AngleBracketed(args) if args.args.len() == 1 => match &args.args[0] {
            syn::GenericArgument::Type(t) => Some(t),
            _ => None,
        },
        _ => None,
    }
}

/// The doc comment's lines, trimmed and joined: rmcp's and the Java framework's `@Tool`
/// description when none is given.
fn doc_comment(func: &ItemFn) -> Option<String> {
    let lines: Vec<String> = func
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value().trim().to_string()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let text = lines.join("\n").trim().to_string();
    (!text.is_empty()).then_some(text)
}

/// `.idempotent(Idempotent::new()...)`, refusing here what `register` would refuse anyway
/// for a tool that requires idempotency, since its own strategy and ttl win over any level.
fn idempotent(
    idem: &IdempotentAttr,
    input_ty: &Type,
    required: bool,
    krate: &TokenStream,
) -> syn::Result<TokenStream> {
    let at = idem.span.unwrap_or_else(Span::call_site);
    let strategy = match (&idem.strategy, &idem.key) {
        (Some(s), Some(_)) if s != "explicit" => {
            return Err(syn::Error::new(
                s.span(),
                format!("`key` names an Explicit tool's key supplier, and the strategy says `{s}`: drop one"),
            ))
        }
        (_, Some(key)) => quote! { .typed_key_supplier::<#input_ty, _, _>(#key) },
        (Some(s), None) => {
            if required && (s == "uuid" || s == "none") {
                return Err(syn::Error::new(
                    s.span(),
                    format!("a `required` tool must be deduplicated, and strategy `{s}` deduplicates nothing: use hash_input or explicit"),
                ));
            }
            match s.to_string().as_str() {
                "hash_input" => quote! { .hash_input() },
                "explicit" => quote! { .explicit() },
                "uuid" => quote! { .strategy(#krate::KeyStrategy::Uuid) },
                _ => quote! { .strategy(#krate::KeyStrategy::None) },
            }
        }
        (None, None) => quote! {},
    };
    let ttl = match idem.ttl_secs {
        Some((0, span)) if required => {
            return Err(syn::Error::new(
                span,
                "a `required` tool needs a positive ttl: a zero one forgets the call at once",
            ))
        }
        Some((secs, _)) => quote! { .ttl(::std::time::Duration::from_secs(#secs)) },
        None => quote! {},
    };
    let on_cache_hit = idem.on_cache_hit.as_ref().map(|w| {
        let variant = camel(w);
        quote! { .on_cache_hit(#krate::OnCacheHit::#variant) }
    });
    let on_mismatch = idem.on_mismatch.as_ref().map(|w| {
        let variant = camel(w);
        quote! { .on_mismatch(#krate::OnMismatch::#variant) }
    });
    let cache_failures = idem
        .cache_failures
        .map(|on| quote! { .cache_failures(#on) });
    let secs = |method: &str, v: Option<u64>| {
        let method = format_ident!("{method}");
        v.map(|s| quote! { .#method(::std::time::Duration::from_secs(#s)) })
    };
    let lease = secs("lease", idem.lease_secs);
    let timeout = secs("timeout", idem.timeout_secs);
    let wait = secs("wait", idem.wait_secs);
    Ok(quote_spanned! {at=>
        .idempotent(#krate::Idempotent::new()
            #strategy #ttl #on_cache_hit #cache_failures #on_mismatch #lease #timeout #wait)
    })
}

/// `return_cached_if_success` -> `ReturnCachedIfSuccess`: the protocol's word to its
/// variant, as the protocol's `words!` pairs them.
fn camel(word: &syn::Ident) -> syn::Ident {
    let camel: String = word
        .to_string()
        .split('_')
        .map(|part| {
            let mut chars = part.chars();
            chars
                .next()
                .map(|c| c.to_ascii_uppercase().to_string() + chars.as_str())
                .unwrap_or_default()
        })
        .collect();
    syn::Ident::new(&camel, word.span())
}
