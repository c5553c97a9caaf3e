//! Everything but a deduplicated `tools/call` passes through the proxy as it came: the
//! reference server `@modelcontextprotocol/server-everything` (every part of the protocol)
//! behind it, and a host (an rmcp client) in front that declares sampling, elicitation and
//! roots: its capabilities reach the server (which then offers its conditional tools), the
//! server's requests reach the host, progress reaches the host under the host's own token,
//! and resources and prompts come back as the server gave them.

#![allow(deprecated)] // sampling and roots: deprecated upstream, still spoken by servers

use std::sync::{Arc, Mutex};

use crate::common::*;
use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, RoleClient, ServiceExt};
use serde_json::json;

#[derive(Clone, Default)]
struct Host {
    progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
    asked: Arc<Mutex<Vec<String>>>,
}

impl rmcp::ClientHandler for Host {
    fn get_info(&self) -> ClientInfo {
        let mut capabilities = ClientCapabilities::default();
        capabilities.sampling = Some(Default::default());
        capabilities.elicitation = Some(Default::default());
        capabilities.roots = Some(Default::default());
        InitializeRequestParams::new(
            capabilities,
            Implementation::new("pgidem-test-host", "1.0.0"),
        )
    }

    async fn create_message(
        &self,
        _params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        self.asked.lock().unwrap().push("sampling".into());
        Ok(CreateMessageResult::new(
            SamplingMessage::assistant_text("sampled by the host"),
            "test-model".into(),
        ))
    }

    async fn create_elicitation(
        &self,
        _request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.asked.lock().unwrap().push("elicitation".into());
        Ok(ElicitResult::new(ElicitationAction::Decline))
    }

    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<ListRootsResult, ErrorData> {
        self.asked.lock().unwrap().push("roots".into());
        Ok(ListRootsResult::new(vec![Root::new(
            "file:///srv/pgidem-test-root",
        )]))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

async fn host_through_proxy(
    rest_of_config: &str,
) -> Option<(rmcp::service::RunningService<RoleClient, Host>, Host)> {
    let (_, node_bin) = Parts::node_or_skip()?;
    let dir = temp_dir("everything");
    let name = pg_idempotency_tests::scope("everything");
    let rest = format!(
        "[upstream]\nname = {}\ncommand = {}\n{rest_of_config}",
        toml_str(&name),
        toml_str(&node_bin.join("mcp-server-everything").display().to_string())
    );
    let config = write_config(&dir, &rest);
    let mut cmd = tokio::process::Command::new(proxy_bin());
    cmd.arg("--config").arg(&config);
    let host = Host::default();
    let client = host
        .clone()
        .serve(rmcp::transport::TokioChildProcess::new(cmd).unwrap())
        .await
        .expect("the proxy initializes");
    Some((client, host))
}

fn text_of(r: &CallToolResult) -> String {
    serde_json::to_string(&r.content).unwrap()
}

#[tokio::test]
async fn the_protocol_passes_through() {
    let Some((client, host)) = host_through_proxy("").await else {
        return;
    };
    let info = client
        .peer()
        .peer_info()
        .expect("the server's initialize answer");
    assert!(
        info.server_info
            .as_ref()
            .map(|s| s.name.contains("everything"))
            .unwrap_or(false),
        "the proxy answers initialize with the server's own: {info:?}"
    );
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    // Offered only to a client that declared sampling and elicitation: the host's
    // capabilities reached the server.
    assert!(names.contains(&"trigger-sampling-request"), "{names:?}");
    assert!(names.contains(&"trigger-elicitation-request"), "{names:?}");

    let resources = client.list_resources(None).await.unwrap();
    assert!(!resources.resources.is_empty());
    let first = &resources.resources[0];
    let read = client
        .read_resource(ReadResourceRequestParams::new(first.uri.clone()))
        .await
        .unwrap();
    assert!(!read.contents.is_empty(), "{read:?}");
    let templates = client.list_resource_templates(None).await.unwrap();
    assert!(!templates.resource_templates.is_empty());

    let prompts = client.list_prompts(None).await.unwrap();
    assert!(
        prompts.prompts.iter().any(|p| p.name == "simple-prompt"),
        "{prompts:?}"
    );
    let prompt = client
        .get_prompt(GetPromptRequestParams::new("simple-prompt"))
        .await
        .unwrap();
    assert!(!prompt.messages.is_empty());

    // The server's requests reach the host, and the host's answers reach the server. These
    // tools are annotated as writes (readOnlyHint: false, idempotentHint: false), so they
    // run through the store: the tool runs in
    // the proxy's holder, and its requests still find the host.
    let sampled = call(
        &client,
        "trigger-sampling-request",
        json!({"prompt": "hello", "maxTokens": 5}),
        None,
    )
    .await
    .unwrap();
    assert!(
        text_of(&sampled).contains("sampled by the host"),
        "{sampled:?}"
    );
    assert_eq!(mark(&sampled)["replayed"], false);
    let elicited = call(&client, "trigger-elicitation-request", json!({}), None)
        .await
        .unwrap();
    assert!(
        text_of(&elicited).to_lowercase().contains("decline"),
        "{elicited:?}"
    );
    let roots = call(&client, "get-roots-list", json!({}), None)
        .await
        .unwrap();
    assert!(text_of(&roots).contains("pgidem-test-root"), "{roots:?}");
    let asked = host.asked.lock().unwrap().clone();
    assert!(
        asked.contains(&"sampling".to_string()) && asked.contains(&"elicitation".to_string()),
        "{asked:?}"
    );
    client.cancel().await.unwrap();
}

/// Progress reaches the host under the token of the host's own request, on a call that
/// passes (readOnlyHint) and on one the proxy deduplicates; a replay has none.
#[tokio::test]
async fn progress_passes_through() {
    let config = "\n[tools.trigger-long-running-operation]\nmode = \"dedupe\"\n";
    let Some((client, host)) = host_through_proxy(config).await else {
        return;
    };
    let args = json!({"duration": 0.3, "steps": 3});
    for (round, replayed) in [(0, false), (1, true)] {
        let request = ClientRequest::CallToolRequest(CallToolRequest::new(params(
            "trigger-long-running-operation",
            args.clone(),
            None,
        )));
        let handle = client
            .peer()
            .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
            .await
            .unwrap();
        let token = handle.progress_token.clone();
        let ServerResult::CallToolResult(result) = handle.await_response().await.unwrap() else {
            panic!("not a tool result")
        };
        assert_eq!(
            mark(&result)["replayed"],
            replayed,
            "round {round}: {result:?}"
        );
        let seen = host
            .progress
            .lock()
            .unwrap()
            .iter()
            .filter(|p| p.progress_token == token)
            .count();
        if replayed {
            assert_eq!(seen, 0, "a replay reports no progress");
        } else {
            until("the progress of the first run", PATIENCE, || {
                host.progress
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|p| p.progress_token == token)
                    .count()
                    >= 3
            })
            .await;
        }
    }
    // A call that passes reports progress as well.
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params(
        "get-sum",
        json!({"a": 1, "b": 2}),
        None,
    )));
    let handle = client
        .peer()
        .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
        .await
        .unwrap();
    let ServerResult::CallToolResult(sum) = handle.await_response().await.unwrap() else {
        panic!()
    };
    assert!(mark(&sum).is_null());
    client.cancel().await.unwrap();
}
