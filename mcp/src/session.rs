//! One front session: the MCP client on one side, its own connection to the upstream
//! server on the other. `initialize` connects upstream with the client's parameters and
//! answers with the server's; `tools/call` of a deduplicated tool goes through the store;
//! `tools/list` shows which tools are; everything else is forwarded as it came.

#![allow(deprecated)] // logging and resources/subscribe are forwarded for the peers that still use them

use std::sync::{Arc, RwLock};

use rmcp::model::*;
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData, Peer, RoleClient, RoleServer, ServerHandler};

use crate::call::{self, Upstream};
use crate::listing::{self, Listed};
use crate::policy::{self, Decision, Hints};
use crate::principal::Principal;
use crate::proxy::Proxy;
use crate::upstream::{self, Connection, ProgressMap};

pub struct Session {
    proxy: Arc<Proxy>,
    connected: tokio::sync::Mutex<Option<Connected>>,
    /// The upstream server's `initialize` answer, which this session answers with.
    info: RwLock<Option<InitializeResult>>,
    client: RwLock<Option<ClientConfig>>,
    /// The tools the server listed, each with its annotations' hints.
    listed: RwLock<Listed>,
    /// Held while the session lists the tools for a name it did not know: calls that miss
    /// meanwhile wait for that listing rather than start their own or be refused.
    listing: tokio::sync::Mutex<()>,
}

struct Connected {
    connection: Connection,
    progress: Arc<ProgressMap>,
}

impl Session {
    pub fn new(proxy: Arc<Proxy>) -> Session {
        Session {
            proxy,
            connected: Default::default(),
            info: Default::default(),
            client: Default::default(),
            listed: Default::default(),
            listing: Default::default(),
        }
    }

    /// The upstream connection, made again if the server went away (a server that was
    /// restarted, a child process that died).
    async fn upstream(
        &self,
        front: &Peer<RoleServer>,
    ) -> Result<(Peer<RoleClient>, Arc<ProgressMap>), ErrorData> {
        let mut connected = self.connected.lock().await;
        if let Some(c) = connected.as_ref() {
            if !c.connection.is_closed() && !c.connection.peer().is_transport_closed() {
                return Ok((c.connection.peer().clone(), c.progress.clone()));
            }
            tracing::warn!(server = %self.proxy.server, "the upstream connection is closed: connecting again");
        }
        let client = self
            .client
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default();
        let progress = Arc::new(ProgressMap::default());
        let connection =
            upstream::connect(&self.proxy.target, front.clone(), client, progress.clone())
                .await
                .map_err(|e| {
                    if let Some(limit) = e.downcast_ref::<upstream::ProcessLimit>() {
                        return limit.answer();
                    }
                    // The command, URL and OS error are the operator's: the client is told
                    // only what it can act on.
                    tracing::error!(
                        server = %self.proxy.server,
                        error = format!("{e:#}"),
                        "cannot connect to the upstream server"
                    );
                    ErrorData::internal_error(
                        "the upstream MCP server cannot be reached",
                        Some(serde_json::json!({
                            "kind": "upstream_unreachable",
                            "hint": "Retry later; nothing was sent upstream. The proxy's operator finds the cause in its log.",
                        })),
                    )
                })?;
        let peer = connection.peer().clone();
        if let Some(info) = peer.peer_info() {
            let mut answer = InitializeResult::new(info.capabilities.clone())
                .with_protocol_version(info.protocol_version.clone());
            if let Some(server) = &info.server_info {
                answer = answer.with_server_info(server.clone());
            }
            answer.instructions = info.instructions.clone();
            answer.meta = info.meta.clone();
            *self.info.write().unwrap_or_else(|p| p.into_inner()) = Some(answer);
        }
        *connected = Some(Connected {
            connection,
            progress: progress.clone(),
        });
        Ok((peer, progress))
    }

    async fn relay(
        &self,
        request: ClientRequest,
        context: &RequestContext<RoleServer>,
    ) -> Result<ServerResult, ErrorData> {
        let (peer, progress) = self.upstream(&context.peer).await?;
        upstream::forward(&peer, &progress, request, context).await
    }

    /// The hints of a tool the server lists; a name it does not list is refused
    /// (before anything reaches the store or the server). A name not known yet makes the
    /// session list the tools again, at most once per `listing::RELIST_EVERY`; a name
    /// outside the specification's rules only makes it list the first time (a server may
    /// list such names: the rules are a SHOULD).
    async fn listed_tool(
        &self,
        name: &str,
        context: &RequestContext<RoleServer>,
    ) -> Result<Hints, ErrorData> {
        if let Some(hint) = self.known_hint(name) {
            return Ok(hint);
        }
        let _listing = self.listing.lock().await;
        if let Some(hint) = self.known_hint(name) {
            return Ok(hint);
        }
        let ever_listed = self
            .listed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .ever_listed();
        if ever_listed && !listing::valid_name(name) {
            return Err(listing::invalid_tool_name(name));
        }
        let relist = self
            .listed
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .claim_relist(std::time::Instant::now());
        if relist {
            let (peer, _) = self.upstream(&context.peer).await?;
            match peer.list_all_tools().await {
                Ok(tools) => self
                    .listed
                    .write()
                    .unwrap_or_else(|p| p.into_inner())
                    .replace(&tools),
                Err(e) => {
                    tracing::warn!(error = %e, "cannot list the upstream tools: a tool not listed yet is refused")
                }
            }
        }
        match self.known_hint(name) {
            Some(hint) => Ok(hint),
            None if !listing::valid_name(name) => Err(listing::invalid_tool_name(name)),
            None => Err(listing::unknown_tool(name)),
        }
    }

    fn known_hint(&self, name: &str) -> Option<Hints> {
        self.listed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .hint(name)
    }

    fn remember_hints(&self, tools: &[Tool]) {
        self.listed
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remember(tools);
    }
}

fn expect<T>(
    result: ServerResult,
    what: &str,
    pick: impl FnOnce(ServerResult) -> Option<T>,
) -> Result<T, ErrorData> {
    let shown = format!("{result:?}");
    pick(result).ok_or_else(|| {
        ErrorData::internal_error(
            format!("the upstream server answered {what} with an unexpected result: {shown:.200}"),
            None,
        )
    })
}

fn optional<M: Default, P>(params: Option<P>) -> RequestOptionalParam<M, P> {
    RequestOptionalParam {
        method: M::default(),
        params,
        extensions: Default::default(),
    }
}

impl ServerHandler for Session {
    fn get_info(&self) -> ServerConfig {
        self.info
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .unwrap_or_default()
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        context.peer.set_peer_info(request.clone());
        *self.client.write().unwrap_or_else(|p| p.into_inner()) = Some(request.clone());
        // A second initialize of the session starts from a new connection.
        *self.connected.lock().await = None;
        self.upstream(&context.peer).await?;
        Ok(self.get_info())
    }

    async fn ping(&self, _context: RequestContext<RoleServer>) -> Result<(), ErrorData> {
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // A session that calls tools is in use: the shorter idle bound no longer applies.
        crate::sessions::tool_called(&context);
        let name = request.name.to_string();
        let hint = self.listed_tool(&name, &context).await?;
        let decision = policy::decide(&self.proxy.config, &name, hint);
        let Decision::Dedupe { policy, .. } = decision else {
            let result = self
                .relay(
                    ClientRequest::CallToolRequest(CallToolRequest::new(request)),
                    &context,
                )
                .await?;
            return expect(result, "tools/call", |r| match r {
                ServerResult::CallToolResult(r) => Some(CallToolResponse::Complete(r)),
                ServerResult::InputRequiredResult(r) => Some(CallToolResponse::InputRequired(r)),
                ServerResult::CreateTaskResult(r) => Some(CallToolResponse::Task(r)),
                _ => None,
            });
        };
        let principal = Principal::of(&context, &self.proxy)?;
        let header_key = crate::principal::header(&context, crate::key::HEADER);
        let (peer, progress) = self.upstream(&context.peer).await?;
        call::deduplicated(
            &self.proxy,
            Upstream {
                peer: &peer,
                progress: &progress,
            },
            request,
            &context,
            &principal.0,
            header_key.as_deref(),
            &policy,
        )
        .await
    }

    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let result = self
            .relay(ClientRequest::ListToolsRequest(optional(request)), &context)
            .await?;
        let mut list = expect(result, "tools/list", |r| match r {
            ServerResult::ListToolsResult(l) => Some(l),
            _ => None,
        })?;
        self.remember_hints(&list.tools);
        for tool in &mut list.tools {
            let hint = Hints::of(tool.annotations.as_ref());
            listing::show(tool, &policy::decide(&self.proxy.config, &tool.name, hint));
        }
        Ok(list)
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let r = self
            .relay(
                ClientRequest::CompleteRequest(CompleteRequest::new(request)),
                &context,
            )
            .await?;
        expect(r, "completion/complete", |r| match r {
            ServerResult::CompleteResult(r) => Some(r),
            _ => None,
        })
    }

    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.relay(
            ClientRequest::SetLevelRequest(SetLevelRequest::new(request)),
            &context,
        )
        .await
        .map(|_| ())
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let r = self
            .relay(
                ClientRequest::GetPromptRequest(GetPromptRequest::new(request)),
                &context,
            )
            .await?;
        expect(r, "prompts/get", |r| match r {
            ServerResult::GetPromptResult(r) => Some(GetPromptResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Some(GetPromptResponse::InputRequired(r)),
            _ => None,
        })
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        let r = self
            .relay(
                ClientRequest::ListPromptsRequest(optional(request)),
                &context,
            )
            .await?;
        expect(r, "prompts/list", |r| match r {
            ServerResult::ListPromptsResult(r) => Some(r),
            _ => None,
        })
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let r = self
            .relay(
                ClientRequest::ListResourcesRequest(optional(request)),
                &context,
            )
            .await?;
        expect(r, "resources/list", |r| match r {
            ServerResult::ListResourcesResult(r) => Some(r),
            _ => None,
        })
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let r = self
            .relay(
                ClientRequest::ListResourceTemplatesRequest(optional(request)),
                &context,
            )
            .await?;
        expect(r, "resources/templates/list", |r| match r {
            ServerResult::ListResourceTemplatesResult(r) => Some(r),
            _ => None,
        })
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let r = self
            .relay(
                ClientRequest::ReadResourceRequest(ReadResourceRequest::new(request)),
                &context,
            )
            .await?;
        expect(r, "resources/read", |r| match r {
            ServerResult::ReadResourceResult(r) => Some(ReadResourceResponse::Complete(r)),
            ServerResult::InputRequiredResult(r) => Some(ReadResourceResponse::InputRequired(r)),
            _ => None,
        })
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.relay(
            ClientRequest::SubscribeRequest(SubscribeRequest::new(request)),
            &context,
        )
        .await
        .map(|_| ())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.relay(
            ClientRequest::UnsubscribeRequest(UnsubscribeRequest::new(request)),
            &context,
        )
        .await
        .map(|_| ())
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, ErrorData> {
        let r = self
            .relay(ClientRequest::CustomRequest(request), &context)
            .await?;
        expect(r, "a custom request", |r| match r {
            ServerResult::CustomResult(r) => Some(r),
            _ => None,
        })
    }

    async fn on_roots_list_changed(&self, context: NotificationContext<RoleServer>) {
        self.notify(
            ClientNotification::RootsListChangedNotification(Default::default()),
            context,
        )
        .await
    }

    async fn on_custom_notification(
        &self,
        notification: CustomNotification,
        context: NotificationContext<RoleServer>,
    ) {
        self.notify(
            ClientNotification::CustomNotification(notification),
            context,
        )
        .await
    }
}

impl Session {
    async fn notify(&self, mut n: ClientNotification, context: NotificationContext<RoleServer>) {
        *n.get_meta_mut() = context.meta;
        let peer = {
            let connected = self.connected.lock().await;
            connected.as_ref().map(|c| c.connection.peer().clone())
        };
        if let Some(peer) = peer {
            if let Err(e) = peer.send_notification(n).await {
                tracing::warn!(error = %e, "a notification could not be passed upstream");
            }
        }
    }
}
