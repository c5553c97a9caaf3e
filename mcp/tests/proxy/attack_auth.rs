//! Attacks on the HTTP front's authentication, each against the real proxy binary over
//! HTTP with the counting server behind it: a principal header, a default principal or a
//! token's spelling standing in for a valid token; weak or shared tokens; an open front
//! on a public address; a foreign `Origin`. docs/security.md ("The MCP front: threat
//! model") lists each case with its test.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::common::*;
use serde_json::{json, Value};

const TOKEN_A: &str = "tenant-a-token-0123456789abcdef";
const TOKEN_B: &str = "tenant-b-token-0123456789abcdef";
const GATEWAY: &str = "the-gateway-token-0123456789abcdef";

/// The counting server behind a proxy whose `[front]` is each test's own.
struct Setup {
    c: Counting,
    name: String,
}

impl Setup {
    fn new(label: &str) -> Option<Setup> {
        let (parts, python) = Parts::python_or_skip()?;
        Some(Setup {
            c: Counting::new(&parts, &python, label),
            name: pg_idempotency_tests::scope("mail"),
        })
    }

    fn config(&self, front: &str) -> PathBuf {
        write_config(
            &self.c.dir,
            &format!("[front]\n{front}\n\n{}", self.c.upstream_stdio(&self.name)),
        )
    }

    fn env(&self, vars: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env = self.c.env();
        env.extend(vars.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        env
    }
}

fn clients() -> String {
    format!("clients = [{{ token = \"{TOKEN_A}\", principal = \"tenant-a\" }}, {{ token_env = \"TENANT_B_TOKEN\", principal = \"tenant-b\" }}]\n")
}

/// Two clients and a gateway whose `X-Principal` names the principal.
fn clients_and_gateway() -> String {
    format!(
        "principal_header = \"x-principal\"\ngateway_token_env = \"GATEWAY_TOKEN\"\n{}",
        clients()
    )
}

const VARS: &[(&str, &str)] = &[("TENANT_B_TOKEN", TOKEN_B), ("GATEWAY_TOKEN", GATEWAY)];

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// What an `initialize` POST with `headers` is answered: status, challenge, JSON body (Null
/// for a stream).
async fn initialize(url: &str, headers: &[(&str, &str)]) -> (u16, Option<String>, Value) {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let challenge = resp
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string());
    let body = if resp.status().is_success() {
        Value::Null
    } else {
        let text = resp.text().await.unwrap();
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    (status, challenge, body)
}

/// An rmcp client, if the proxy lets it initialize.
async fn try_client(url: &str, headers: &[(&str, &str)]) -> Option<Client> {
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::ServiceExt;
    let mut custom = std::collections::HashMap::new();
    for (k, v) in headers {
        custom.insert(
            http::HeaderName::try_from(*k).unwrap(),
            http::HeaderValue::try_from(*v).unwrap(),
        );
    }
    let config =
        StreamableHttpClientTransportConfig::with_uri(url.to_string()).custom_headers(custom);
    ().serve(StreamableHttpClientTransport::from_config(config))
        .await
        .ok()
}

fn send(subject: &str) -> Value {
    json!({"to": "a@x", "subject": subject})
}

async fn db() -> tokio_postgres::Client {
    let (db, conn) = tokio_postgres::connect(&pg_idempotency_tests::dsn(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    db
}

async fn stored(db: &tokio_postgres::Client, scope: &str, key: &str) -> bool {
    // Unnamed statements (query_typed): the suite runs through a pooler in transaction mode too.
    !db.query_typed(
        "SELECT 1 FROM idem_lookup($1, $2)",
        &[
            (&scope, tokio_postgres::types::Type::TEXT),
            (&key, tokio_postgres::types::Type::TEXT),
        ],
    )
    .await
    .unwrap()
    .is_empty()
}

/// How a start ended: listening (on this port, the child kept), or refused.
enum Outcome {
    Started {
        _child: tokio::process::Child,
        port: u16,
    },
    Refused {
        status: std::process::ExitStatus,
        stderr: String,
    },
}

/// Starts the binary with `args` and waits for what it says: its listening line, or its
/// end. A minute without either is a hang.
async fn start(config: &Path, args: &[&str], env: &[(String, String)]) -> Outcome {
    use tokio::io::{AsyncBufReadExt, BufReader};
    let mut child = tokio::process::Command::new(proxy_bin())
        .arg("--config")
        .arg(config)
        .args(args)
        .env("PGIDEM_MCP_LOG", "info")
        .envs(env.iter().cloned())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stderr = child.stderr.take().unwrap();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}");
            let _ = tx.send(line);
        }
    });
    let mut seen = String::new();
    let listening = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = rx.recv().await {
            if line.contains("serving MCP over Streamable HTTP") {
                return Some(line);
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        None
    })
    .await
    .expect("waited a minute for the proxy to listen or end");
    match listening {
        Some(line) => Outcome::Started {
            port: port_of(&line),
            _child: child,
        },
        None => Outcome::Refused {
            status: child.wait().await.unwrap(),
            stderr: seen,
        },
    }
}

/// The port of the `address=` in the listening line (its colours taken out first).
fn port_of(line: &str) -> u16 {
    let mut plain = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An escape sequence: ESC [ parameters, up to its final letter.
            for e in chars.by_ref() {
                if e.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let at = plain.find("address=").expect("the line names the address") + "address=".len();
    let addr: String = plain[at..]
        .chars()
        .take_while(|c| !c.is_whitespace())
        .collect();
    addr.rsplit_once(':')
        .and_then(|(_, p)| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {plain:?}"))
}

/// The start was refused, with an error that says `says`, never showing `secret`.
fn assert_refused(outcome: Outcome, says: &[&str], secret: Option<&str>) {
    let Outcome::Refused { status, stderr } = outcome else {
        panic!("the proxy started; it must refuse this configuration");
    };
    assert!(!status.success(), "{status}: {stderr}");
    for s in says {
        assert!(stderr.contains(s), "the error does not say {s:?}: {stderr}");
    }
    if let Some(secret) = secret {
        assert!(
            !stderr.contains(secret),
            "the error shows the token: {stderr}"
        );
    }
}

const LOOPBACK: &[&str] = &["--http", "127.0.0.1:0"];

/// Tokens and a gateway configured: a request without a token that names tenant-b in the
/// principal header is 401, and neither replays tenant-b's call nor runs one in its name.
#[tokio::test]
async fn no_token_with_principal_header_is_401() {
    let Some(s) = Setup::new("auth-no-token-header") else {
        return;
    };
    let mut proxy = HttpProxy::start(&s.config(&clients_and_gateway()), &s.env(VARS)).await;
    let b = http_client(&proxy.url, &[("authorization", &bearer(TOKEN_B))]).await;
    let theirs = call(&b, "send_email", send("b's"), key_meta("k-1"))
        .await
        .unwrap();
    let scope = mark(&theirs)["scope"].as_str().unwrap().to_string();
    let (status, challenge, body) = initialize(&proxy.url, &[("x-principal", "tenant-b")]).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(challenge.as_deref(), Some("Bearer"));
    assert_eq!(body["error"], "unauthorized", "{body}");
    assert!(
        try_client(&proxy.url, &[("x-principal", "tenant-b")])
            .await
            .is_none(),
        "a session was opened without a token"
    );
    assert_eq!(s.c.count("send_email"), 1, "only tenant-b's own call ran");
    assert!(!stored(&db().await, &scope, "k-2").await);
    // tenant-b's own next call is its first of that key.
    let next = call(&b, "send_email", send("b's"), key_meta("k-2"))
        .await
        .unwrap();
    assert_eq!(mark(&next)["replayed"], false);
    b.cancel().await.unwrap();
    proxy.kill().await;
}

/// A wrong token next to the principal header does not fall through to the header: 401
/// `invalid_token`.
#[tokio::test]
async fn wrong_token_with_principal_header_is_401() {
    let Some(s) = Setup::new("auth-wrong-token-header") else {
        return;
    };
    let mut proxy = HttpProxy::start(&s.config(&clients_and_gateway()), &s.env(VARS)).await;
    let (status, challenge, body) = initialize(
        &proxy.url,
        &[
            ("authorization", "Bearer not-a-token-the-proxy-knows"),
            ("x-principal", "tenant-b"),
        ],
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(challenge.as_deref(), Some("Bearer error=\"invalid_token\""));
    assert_eq!(body["error"], "invalid_token", "{body}");
    assert_eq!(s.c.count("send_email"), 0);
    proxy.kill().await;
}

/// Tokens and a principal header without a gateway credential: refused at start (before,
/// a request without a token was served as whoever the header named).
#[tokio::test]
async fn principal_header_without_gateway_token_is_refused_at_start() {
    let Some(s) = Setup::new("auth-header-no-gateway") else {
        return;
    };
    let config = s.config(&format!(
        "principal_header = \"x-principal\"\n{}",
        clients()
    ));
    let outcome = start(&config, LOOPBACK, &s.env(VARS)).await;
    assert_refused(
        outcome,
        &["principal_header", "gateway_token_env"],
        Some(TOKEN_B),
    );
}

/// A default principal next to tokens (or a gateway), from the file or `--principal`:
/// refused at start (before, a request without a token was served as it).
#[tokio::test]
async fn default_principal_with_tokens_is_refused_at_start() {
    let Some(s) = Setup::new("auth-default-principal") else {
        return;
    };
    let in_file = s.config(&format!("principal = \"ops\"\n{}", clients()));
    assert_refused(
        start(&in_file, LOOPBACK, &s.env(VARS)).await,
        &["principal = \"ops\"", "Remove principal"],
        None,
    );
    let with_flag = s.config(&clients_and_gateway());
    let args = ["--http", "127.0.0.1:0", "--principal", "ops"];
    assert_refused(
        start(&with_flag, &args, &s.env(VARS)).await,
        &["--principal", "Remove principal"],
        None,
    );
}

/// `bearer` in lower case with a wrong token: 401 `invalid_token`, not a fall-through.
#[tokio::test]
async fn lowercase_bearer_wrong_token_is_401() {
    let Some(s) = Setup::new("auth-lower-wrong") else {
        return;
    };
    let mut proxy = HttpProxy::start(&s.config(&clients()), &s.env(VARS)).await;
    for auth in [
        "bearer not-a-token-the-proxy-knows",
        "BEARER not-a-token-the-proxy-knows",
    ] {
        let (status, challenge, body) = initialize(&proxy.url, &[("authorization", auth)]).await;
        assert_eq!(status, 401, "{auth}: {body}");
        assert_eq!(challenge.as_deref(), Some("Bearer error=\"invalid_token\""));
        assert_eq!(body["error"], "invalid_token", "{body}");
    }
    proxy.kill().await;
}

/// `bearer` in lower case with a right token: served as the token's principal (RFC 7235:
/// the scheme is case-insensitive).
#[tokio::test]
async fn lowercase_bearer_right_token_is_served() {
    let Some(s) = Setup::new("auth-lower-right") else {
        return;
    };
    let mut proxy = HttpProxy::start(&s.config(&clients()), &s.env(VARS)).await;
    let lower = format!("bearer {TOKEN_A}");
    let a = try_client(&proxy.url, &[("authorization", &lower)])
        .await
        .expect("a lower-case bearer scheme is accepted");
    let first = call(&a, "send_email", send("lower"), key_meta("l-1"))
        .await
        .unwrap();
    assert!(
        mark(&first)["scope"].as_str().unwrap().contains("tenant-a"),
        "{first:?}"
    );
    // The same principal as the canonical spelling: its call replays.
    let canonical = http_client(&proxy.url, &[("authorization", &bearer(TOKEN_A))]).await;
    let again = call(&canonical, "send_email", send("lower"), key_meta("l-1"))
        .await
        .unwrap();
    assert_eq!(mark(&again)["replayed"], true);
    assert_eq!(s.c.count("send_email"), 1);
    for c in [a, canonical] {
        c.cancel().await.unwrap();
    }
    proxy.kill().await;
}

/// A token variable set but empty: refused at start, naming the entry.
#[tokio::test]
async fn empty_token_variable_is_refused_at_start() {
    let Some(s) = Setup::new("auth-empty-token") else {
        return;
    };
    let outcome = start(
        &s.config(&clients()),
        LOOPBACK,
        &s.env(&[("TENANT_B_TOKEN", "")]),
    )
    .await;
    assert_refused(
        outcome,
        &[
            "entry 2 (principal \"tenant-b\")",
            "TENANT_B_TOKEN is empty",
        ],
        None,
    );
}

/// A token shorter than 16 bytes: refused at start, naming the entry, never the token.
#[tokio::test]
async fn short_token_is_refused_at_start() {
    let Some(s) = Setup::new("auth-short-token") else {
        return;
    };
    let short = "b-secret-15byte";
    let outcome = start(
        &s.config(&clients()),
        LOOPBACK,
        &s.env(&[("TENANT_B_TOKEN", short)]),
    )
    .await;
    assert_refused(
        outcome,
        &["entry 2 (principal \"tenant-b\")", "15 bytes"],
        Some(short),
    );
}

/// Two entries with one token (two principals made one): refused at start.
#[tokio::test]
async fn duplicate_tokens_are_refused_at_start() {
    let Some(s) = Setup::new("auth-duplicate-token") else {
        return;
    };
    let outcome = start(
        &s.config(&clients()),
        LOOPBACK,
        &s.env(&[("TENANT_B_TOKEN", TOKEN_A)]),
    )
    .await;
    assert_refused(outcome, &["same token", "entry 1"], Some(TOKEN_A));
}

/// No authentication on an address other than loopback: refused at start.
#[tokio::test]
async fn non_loopback_listen_without_auth_is_refused_at_start() {
    let Some(s) = Setup::new("auth-open-public") else {
        return;
    };
    let outcome = start(&s.config(""), &["--http", "0.0.0.0:0"], &s.c.env()).await;
    assert_refused(
        outcome,
        &[
            "0.0.0.0:0",
            "not a loopback address",
            "--allow-unauthenticated",
        ],
        None,
    );
}

/// The same with `--allow-unauthenticated`: it starts, and serves everyone as
/// `anonymous`.
#[tokio::test]
async fn non_loopback_listen_with_allow_unauthenticated_starts() {
    let Some(s) = Setup::new("auth-open-named") else {
        return;
    };
    let args = ["--http", "0.0.0.0:0", "--allow-unauthenticated"];
    let Outcome::Started { port, _child } = start(&s.config(""), &args, &s.c.env()).await else {
        panic!("the proxy refused to start with --allow-unauthenticated");
    };
    let client = http_client(&format!("http://127.0.0.1:{port}/mcp"), &[]).await;
    let r = call(&client, "send_email", send("open"), None)
        .await
        .unwrap();
    assert!(
        mark(&r)["scope"].as_str().unwrap().contains("anonymous"),
        "{r:?}"
    );
    client.cancel().await.unwrap();
}

/// A page on another site reaching the proxy through the browser (DNS rebinding): 403.
#[tokio::test]
async fn foreign_origin_is_403() {
    let Some(s) = Setup::new("auth-origin-foreign") else {
        return;
    };
    let mut proxy = HttpProxy::start(&s.config(""), &s.c.env()).await;
    let (status, _, body) = initialize(&proxy.url, &[("origin", "http://evil.example")]).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"], "origin_not_allowed", "{body}");
    // Before the credential: a valid token does not let a foreign page in either.
    let mut with_token = HttpProxy::start(&s.config(&clients()), &s.env(VARS)).await;
    let (status, _, _) = initialize(
        &with_token.url,
        &[
            ("origin", "http://evil.example"),
            ("authorization", &bearer(TOKEN_A)),
        ],
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(s.c.count("send_email"), 0);
    proxy.kill().await;
    with_token.kill().await;
}

/// A page served from this machine (any loopback origin, any port) is served; names that
/// only look like loopback are 403.
#[tokio::test]
async fn loopback_origin_is_served_and_lookalikes_are_403() {
    let Some(s) = Setup::new("auth-origin-loopback") else {
        return;
    };
    let mut proxy = HttpProxy::start(&s.config(""), &s.c.env()).await;
    for origin in [
        "http://localhost:5173",
        "http://127.0.0.1",
        "https://[::1]:8443",
    ] {
        let client = try_client(&proxy.url, &[("origin", origin)])
            .await
            .unwrap_or_else(|| panic!("{origin} was refused"));
        call(&client, "send_email", send(origin), None)
            .await
            .unwrap();
        client.cancel().await.unwrap();
    }
    assert_eq!(s.c.count("send_email"), 3);
    for lookalike in [
        "http://localhost.evil.example",
        "http://127.0.0.1.evil.example",
        "null",
    ] {
        let (status, _, body) = initialize(&proxy.url, &[("origin", lookalike)]).await;
        assert_eq!(status, 403, "{lookalike}: {body}");
    }
    proxy.kill().await;
}

/// `[front] allowed_origins` names the origins served, instead of loopback.
#[tokio::test]
async fn configured_origin_is_served() {
    let Some(s) = Setup::new("auth-origin-configured") else {
        return;
    };
    let front = format!("allowed_origins = [\"https://app.example\"]\n{}", clients());
    let mut proxy = HttpProxy::start(&s.config(&front), &s.env(VARS)).await;
    let client = try_client(
        &proxy.url,
        &[
            ("origin", "https://app.example"),
            ("authorization", &bearer(TOKEN_A)),
        ],
    )
    .await
    .expect("the configured origin is served");
    call(&client, "send_email", send("app"), None)
        .await
        .unwrap();
    client.cancel().await.unwrap();
    let (status, _, body) = initialize(
        &proxy.url,
        &[
            ("origin", "http://localhost:5173"),
            ("authorization", &bearer(TOKEN_A)),
        ],
    )
    .await;
    assert_eq!(status, 403, "the list replaces loopback: {body}");
    proxy.kill().await;
}

/// A gateway front: the principal header without the gateway's token is 401.
#[tokio::test]
async fn principal_header_without_gateway_token_is_401() {
    let Some(s) = Setup::new("auth-gateway-no-token") else {
        return;
    };
    let front = "principal_header = \"x-principal\"\ngateway_token_env = \"GATEWAY_TOKEN\"\n";
    let mut proxy = HttpProxy::start(&s.config(front), &s.env(VARS)).await;
    let (status, challenge, body) = initialize(&proxy.url, &[("x-principal", "tenant-z")]).await;
    assert_eq!(status, 401, "{body}");
    assert_eq!(challenge.as_deref(), Some("Bearer"));
    assert!(try_client(&proxy.url, &[("x-principal", "tenant-z")])
        .await
        .is_none());
    assert_eq!(s.c.count("send_email"), 0);
    proxy.kill().await;
}

/// With the gateway's token, the request is made for the principal its header names: the
/// same key space as a client token of that principal.
#[tokio::test]
async fn gateway_token_serves_the_header_principal() {
    let Some(s) = Setup::new("auth-gateway") else {
        return;
    };
    let front = format!(
        "principal_header = \"x-principal\"\ngateway_token_env = \"GATEWAY_TOKEN\"\nclients = [{{ token = \"{TOKEN_A}\", principal = \"tenant-z\" }}]\n"
    );
    let mut proxy = HttpProxy::start(&s.config(&front), &s.env(VARS)).await;
    let gateway = http_client(
        &proxy.url,
        &[
            ("authorization", &bearer(GATEWAY)),
            ("x-principal", "tenant-z"),
        ],
    )
    .await;
    let first = call(&gateway, "send_email", send("via gateway"), key_meta("g-1"))
        .await
        .unwrap();
    assert!(
        mark(&first)["scope"].as_str().unwrap().contains("tenant-z"),
        "{first:?}"
    );
    let direct = http_client(&proxy.url, &[("authorization", &bearer(TOKEN_A))]).await;
    let again = call(&direct, "send_email", send("via gateway"), key_meta("g-1"))
        .await
        .unwrap();
    assert_eq!(
        mark(&again)["replayed"],
        true,
        "one principal, one key space"
    );
    assert_eq!(s.c.count("send_email"), 1);
    for c in [gateway, direct] {
        c.cancel().await.unwrap();
    }
    proxy.kill().await;
}

/// The gateway's token with the principal header missing or blank: 401, no principal
/// made up.
#[tokio::test]
async fn gateway_token_without_principal_header_is_401() {
    let Some(s) = Setup::new("auth-gateway-no-header") else {
        return;
    };
    let mut proxy = HttpProxy::start(&s.config(&clients_and_gateway()), &s.env(VARS)).await;
    let auth = bearer(GATEWAY);
    for headers in [
        vec![("authorization", auth.as_str())],
        vec![("authorization", auth.as_str()), ("x-principal", "  ")],
    ] {
        let (status, challenge, body) = initialize(&proxy.url, &headers).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(
            challenge.as_deref(),
            Some("Bearer error=\"invalid_request\"")
        );
        assert_eq!(body["error"], "missing_principal", "{body}");
    }
    proxy.kill().await;
}

/// A client's token names its principal: a principal header it sends is ignored.
#[tokio::test]
async fn client_token_ignores_the_principal_header() {
    let Some(s) = Setup::new("auth-client-header") else {
        return;
    };
    let mut proxy = HttpProxy::start(&s.config(&clients_and_gateway()), &s.env(VARS)).await;
    let b = http_client(&proxy.url, &[("authorization", &bearer(TOKEN_B))]).await;
    let theirs = call(&b, "send_email", send("b's"), key_meta("h-1"))
        .await
        .unwrap();
    let a = http_client(
        &proxy.url,
        &[
            ("authorization", &bearer(TOKEN_A)),
            ("x-principal", "tenant-b"),
        ],
    )
    .await;
    let mine = call(&a, "send_email", send("b's"), key_meta("h-1"))
        .await
        .unwrap();
    assert_eq!(mark(&mine)["replayed"], false, "not tenant-b's call");
    assert_ne!(mark(&mine)["scope"], mark(&theirs)["scope"]);
    assert_eq!(s.c.count("send_email"), 2);
    for c in [a, b] {
        c.cancel().await.unwrap();
    }
    proxy.kill().await;
}
