//! The RPC methods (SPEC §8): each validates its params, does its work, and answers with a
//! payload or an error the client can act on.

use chrono::Utc;
use ferry_channel::{
    AckOutcome, Attachment, ChatKind, ChatRef, ClientRequest, Delivery, InboundMessage, Sender, Target,
};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::time::Duration;

use super::GatewayState;
use super::approvals;
use super::hub::Client;
use super::protocol::{ErrorCode, RpcError, params};
use super::runs::{Claim, Waited};
use super::webchat::{ACCOUNT_ID, CHANNEL_NAME};
use crate::agent::tools::parse_chat;
use crate::queue::StopScope;
use crate::routing::{SessionKey, too_long};

/// `agent.wait`'s default wait.
const DEFAULT_WAIT_MS: u64 = 30_000;
/// The longest wait one `agent.wait` may ask for.
const MAX_WAIT_MS: u64 = 10 * 60 * 1000;
/// How long acceptance may take (the message's durable write) before the client hears
/// "try again".
const ACCEPT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest idempotency key accepted.
const MAX_KEY_LEN: usize = 256;
/// `chat.history`'s default number of messages.
const DEFAULT_HISTORY: usize = 100;
/// The most files one `chat.send` may carry.
const MAX_ATTACHMENTS: usize = 10;

/// Calls `method` for `client`.
pub async fn call(gateway: &GatewayState, client: &Client, method: &str, raw: &Value) -> Result<Value, RpcError> {
    match method {
        "agent" => agent(gateway, client, params(raw)?).await,
        "agent.wait" => agent_wait(gateway, params(raw)?).await,
        "chat.send" => chat_send(gateway, client, params(raw)?).await,
        "chat.abort" => chat_abort(gateway, client, params(raw)?).await,
        "chat.history" => chat_history(gateway, client, params(raw)?).await,
        "sessions.list" => sessions_list(gateway, params(raw)?).await,
        "health" => Ok(gateway.health()),
        other => Err(RpcError::invalid(format!("unknown method `{other}`"))),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct AgentParams {
    message: String,
    idempotency_key: String,
    session_key: Option<String>,
    agent_id: Option<String>,
    /// Seconds.
    timeout: Option<u64>,
    extra_system_prompt: Option<String>,
    /// Deliver the reply to `channel` / `to` as well.
    #[serde(default)]
    deliver: bool,
    channel: Option<String>,
    /// `direct:<id>`, `group:<id>`, `channel:<id>` or a bare (direct) id.
    to: Option<String>,
    thread_id: Option<String>,
    account_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ChatSendParams {
    /// May be empty when the message carries files.
    #[serde(default)]
    message: String,
    idempotency_key: String,
    session_key: Option<String>,
    /// The agent to talk to, when no session is named: the client's own session with it.
    agent_id: Option<String>,
    /// Files uploaded to `/webchat/upload`, by the id it answered.
    #[serde(default)]
    attachments: Vec<AttachmentParam>,
}

/// One file of a `chat.send`: `{ id, name? }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AttachmentParam {
    id: String,
    /// The name to show and give the model (the upload's own name otherwise unknown).
    name: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct WaitParams {
    run_id: String,
    timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct SessionParams {
    session_key: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct HistoryParams {
    session_key: Option<String>,
    limit: Option<usize>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ListParams {
    limit: Option<usize>,
    /// Only this agent's sessions.
    agent_id: Option<String>,
}

/// A message for the agent from a client, validated.
struct Submission {
    message: String,
    key: String,
    session_key: String,
    request: ClientRequest,
    /// Uploaded files the message carries (`chat.send`).
    attachments: Vec<Attachment>,
}

async fn agent(gateway: &GatewayState, client: &Client, params: AgentParams) -> Result<Value, RpcError> {
    let agent = named_agent(gateway, params.agent_id.as_deref())?;
    if params.timeout == Some(0) {
        return Err(RpcError::invalid("params.timeout: must be at least 1 second"));
    }
    let session_key = match (&params.session_key, agent) {
        (Some(key), agent) => session_of_agent(gateway, key, agent)?,
        (None, Some(agent)) => format!("agent:{agent}:main"),
        (None, None) => format!("agent:{}:main", gateway.dispatcher.agents().default_id()),
    };
    let deliver = delivery(gateway, &params)?;
    let submission = submission(gateway, params.message, params.idempotency_key, session_key, false)?;
    let submission = Submission {
        request: ClientRequest {
            extra_system_prompt: params.extra_system_prompt,
            timeout_seconds: params.timeout,
            deliver,
            ..submission.request
        },
        ..submission
    };
    submit(gateway, client, submission).await
}

async fn chat_send(gateway: &GatewayState, client: &Client, params: ChatSendParams) -> Result<Value, RpcError> {
    let agent = named_agent(gateway, params.agent_id.as_deref())?;
    let session_key = match (&params.session_key, agent) {
        (Some(key), agent) => session_of_agent(gateway, key, agent)?,
        (None, Some(agent)) => gateway.webchat_session(&client.id, Some(agent)),
        (None, None) => client.session_key.clone(),
    };
    let attachments = uploaded(gateway, params.attachments).await?;
    let submission = submission(gateway, params.message, params.idempotency_key, session_key, !attachments.is_empty())?;
    submit(gateway, client, Submission { attachments, ..submission }).await
}

/// The uploaded files a `chat.send` names, each checked to be stored.
async fn uploaded(gateway: &GatewayState, named: Vec<AttachmentParam>) -> Result<Vec<Attachment>, RpcError> {
    if named.is_empty() {
        return Ok(Vec::new());
    }
    let Some(media) = gateway.media.clone() else {
        return Err(RpcError::invalid(
            "params.attachments: this gateway takes no files (no media store, or the web chat is off)",
        ));
    };
    if named.len() > MAX_ATTACHMENTS {
        return Err(RpcError::invalid(format!("params.attachments: at most {MAX_ATTACHMENTS} files a message")));
    }
    let named: Vec<(String, Option<String>)> = named.into_iter().map(|file| (file.id, file.name)).collect();
    let checked = tokio::task::spawn_blocking(move || super::webchat::files::attachments_of(&media, &named)).await;
    match checked {
        Ok(Ok(attachments)) => Ok(attachments),
        Ok(Err(message)) => Err(RpcError::invalid(message)),
        Err(_) => Err(RpcError::unavailable("the files could not be checked; send them again")),
    }
}

/// Where `agent` should deliver the reply besides the client: `deliver: true` with a
/// connected `channel` and a `to`.
fn delivery(gateway: &GatewayState, params: &AgentParams) -> Result<Option<Delivery>, RpcError> {
    if !params.deliver {
        if params.channel.is_some() || params.to.is_some() {
            return Err(RpcError::invalid("params.channel / params.to: set deliver: true to deliver the reply there"));
        }
        return Ok(None);
    }
    let (Some(channel), Some(to)) = (&params.channel, &params.to) else {
        return Err(RpcError::invalid("params.deliver: needs channel and to"));
    };
    let channel = channel.to_lowercase();
    if gateway.channels.get(&channel, params.account_id.as_deref()).is_none() {
        let connected = gateway.channels.describe().join(", ");
        return Err(RpcError::invalid(format!(
            "params.channel: `{channel}` is not connected (connected: {connected})"
        )));
    }
    let chat =
        parse_chat(to, ChatKind::Direct).map_err(|error| RpcError::invalid(format!("params.to: {}", error.0)))?;
    let target = Target { chat, thread_id: params.thread_id.clone() };
    Ok(Some(Delivery { channel, account_id: params.account_id.clone(), target }))
}

/// `message` validated; it may be empty when the message carries files (`with_files`).
fn submission(
    gateway: &GatewayState,
    message: String,
    key: String,
    session_key: String,
    with_files: bool,
) -> Result<Submission, RpcError> {
    if message.trim().is_empty() && !with_files {
        return Err(RpcError::invalid("params.message: must not be empty"));
    }
    let limit = gateway.dispatcher.max_inbound_chars();
    if let Some(chars) = too_long(&message, limit) {
        return Err(RpcError::invalid(format!(
            "params.message: {chars} characters, over the limit of {limit} (messages.max_inbound_chars)"
        )));
    }
    let key = key.trim().to_owned();
    if key.is_empty() || key.len() > MAX_KEY_LEN || key.chars().any(char::is_control) {
        return Err(RpcError::invalid(format!(
            "params.idempotencyKey: must be 1..={MAX_KEY_LEN} printable characters"
        )));
    }
    let request = ClientRequest { run_id: key.clone(), session_key: Some(session_key.clone()), ..Default::default() };
    Ok(Submission { message, key, session_key, request, attachments: Vec::new() })
}

/// A session key a client named, checked: well-formed and of one of this gateway's agents.
fn gateway_session(gateway: &GatewayState, key: &str) -> Result<String, RpcError> {
    let parsed = SessionKey::parse(key).map_err(|error| RpcError::invalid(format!("params.sessionKey: {error}")))?;
    if gateway.agent(parsed.agent_id()).is_none() {
        return Err(RpcError::invalid(format!(
            "params.sessionKey: unknown agent `{}` (agents: {})",
            parsed.agent_id(),
            agent_list(gateway)
        )));
    }
    Ok(parsed.into_string())
}

/// [`gateway_session`], which must be of `agent` when the client named one too.
fn session_of_agent(gateway: &GatewayState, key: &str, agent: Option<&str>) -> Result<String, RpcError> {
    let key = gateway_session(gateway, key)?;
    match agent {
        Some(agent) if SessionKey::parse(&key).is_ok_and(|parsed| parsed.agent_id() != agent) => {
            Err(RpcError::invalid(format!("params.sessionKey: not a session of agent `{agent}` (params.agentId)")))
        }
        _ => Ok(key),
    }
}

/// The agent a client named (`agentId`), as the config spells it; an unknown one is refused.
fn named_agent<'g>(gateway: &'g GatewayState, named: Option<&str>) -> Result<Option<&'g str>, RpcError> {
    let Some(named) = named else { return Ok(None) };
    match gateway.agent(named.trim()) {
        Some(agent) => Ok(Some(&agent.id)),
        None => {
            Err(RpcError::invalid(format!("params.agentId: unknown agent `{named}` (agents: {})", agent_list(gateway))))
        }
    }
}

fn agent_list(gateway: &GatewayState) -> String {
    gateway.agents.iter().map(|agent| agent.id.as_str()).collect::<Vec<_>>().join(", ")
}

/// Hands a client's message to the dispatcher through the web chat channel and answers
/// once it is durably accepted; a repeated idempotency key gets the first answer.
async fn submit(gateway: &GatewayState, client: &Client, submission: Submission) -> Result<Value, RpcError> {
    match gateway.hub.runs.claim(&submission.key) {
        Claim::Answered(answer) => return Ok(answer),
        Claim::InFlight => {
            return Err(RpcError {
                retry_after_ms: Some(500),
                ..RpcError::unavailable("the same idempotencyKey is being accepted")
            });
        }
        Claim::New => {}
    }
    // Follow the session before the run can start, so no event is missed.
    gateway.hub.follow_session(client.connection, &submission.session_key);
    let mut message = InboundMessage::new(
        CHANNEL_NAME,
        ACCOUNT_ID,
        ChatRef::new(ChatKind::Direct, client.id.clone()),
        Sender::user(client.id.clone()),
        submission.key.clone(),
        submission.message,
    );
    message.request = Some(submission.request);
    message.attachments = submission.attachments;
    let accepted = match gateway.webchat.submit(message).await {
        Ok(ack) => tokio::time::timeout(ACCEPT_TIMEOUT, ack.outcome()).await,
        Err(_) => Ok(AckOutcome::Abandoned),
    };
    if accepted != Ok(AckOutcome::Accepted) {
        gateway.hub.runs.release(&submission.key);
        return Err(RpcError::unavailable("the message could not be recorded; send it again"));
    }
    let answer = json!({
        "runId": submission.key,
        "sessionKey": submission.session_key,
        "acceptedAt": Utc::now(),
    });
    gateway.hub.runs.answered(&submission.key, answer.clone(), &submission.key);
    Ok(answer)
}

async fn agent_wait(gateway: &GatewayState, params: WaitParams) -> Result<Value, RpcError> {
    let timeout = Duration::from_millis(params.timeout_ms.unwrap_or(DEFAULT_WAIT_MS).min(MAX_WAIT_MS));
    match gateway.hub.runs.wait(&params.run_id, timeout).await {
        Waited::Ended(snapshot) => {
            let mut payload = serde_json::to_value(&snapshot).unwrap_or_else(|_| json!({}));
            payload["runId"] = json!(params.run_id);
            Ok(payload)
        }
        Waited::StillRunning { started_at } => {
            Ok(json!({ "runId": params.run_id, "status": "timeout", "startedAt": started_at }))
        }
        Waited::Unknown => Err(RpcError::new(ErrorCode::NotFound, format!("no run `{}`", params.run_id))),
    }
}

async fn chat_abort(gateway: &GatewayState, client: &Client, params: SessionParams) -> Result<Value, RpcError> {
    let session_key = client_session(gateway, client, params.session_key.as_deref())?;
    let stopped = gateway.dispatcher.scheduler().stop(&session_key, &StopScope::Session).await;
    Ok(json!({ "aborted": stopped.aborted_run, "cleared": stopped.cleared }))
}

async fn chat_history(gateway: &GatewayState, client: &Client, params: HistoryParams) -> Result<Value, RpcError> {
    let session_key = client_session(gateway, client, params.session_key.as_deref())?;
    let store = gateway.dispatcher.store();
    let session = store.get(&session_key).await.map_err(|error| {
        tracing::error!(%session_key, %error, "cannot read a session for chat.history");
        RpcError::unavailable("the conversation cannot be read right now")
    })?;
    let mut messages = Vec::new();
    if let Some(session) = session {
        let transcript = store.transcript(&session.session_id).await.map_err(|error| {
            tracing::error!(%session_key, %error, "cannot read a transcript for chat.history");
            RpcError::unavailable("the conversation cannot be read right now")
        })?;
        let requests = gateway.approvals.as_ref().map(|approvals| approvals.of_session(&session_key));
        let running = gateway.dispatcher.scheduler().status(&session_key).running;
        messages = approvals::history(transcript, requests.unwrap_or_default(), running);
    }
    let mut messages = mark_expired(gateway, messages).await;
    let limit = params.limit.unwrap_or(DEFAULT_HISTORY);
    let skip = messages.len().saturating_sub(limit);
    Ok(json!({ "sessionKey": session_key, "messages": messages.split_off(skip) }))
}

/// Marks each file of `messages` that can no longer be downloaded (swept after
/// `media.ttl_days`, or no media here) with `expired: true`, so a client shows a placeholder
/// rather than fetch it.
async fn mark_expired(gateway: &GatewayState, mut messages: Vec<Value>) -> Vec<Value> {
    let media = gateway.media.clone();
    let marked = tokio::task::spawn_blocking(move || {
        let files = messages.iter_mut().filter_map(|message| message.get_mut("files")?.as_array_mut()).flatten();
        for file in files {
            let id = file.get("id").and_then(Value::as_str).unwrap_or_default();
            let stored =
                media.as_ref().and_then(|media| media.store().path_of(id).ok()).is_some_and(|path| path.is_file());
            if !stored {
                file["expired"] = json!(true);
            }
        }
        messages
    });
    marked.await.unwrap_or_default()
}

/// The session a `chat.*` call is about, and the connection follows it from now on.
fn client_session(gateway: &GatewayState, client: &Client, named: Option<&str>) -> Result<String, RpcError> {
    let session_key = match named {
        Some(key) => gateway_session(gateway, key)?,
        None => client.session_key.clone(),
    };
    gateway.hub.follow_session(client.connection, &session_key);
    Ok(session_key)
}

async fn sessions_list(gateway: &GatewayState, params: ListParams) -> Result<Value, RpcError> {
    let agent = named_agent(gateway, params.agent_id.as_deref())?;
    let (store, limit) = (gateway.dispatcher.store(), params.limit.unwrap_or(100));
    let listed = match agent {
        Some(agent) => store.list_of_agent(agent, limit).await,
        None => store.list(limit).await,
    };
    let sessions = listed.map_err(|error| {
        tracing::error!(%error, "cannot list sessions");
        RpcError::unavailable("sessions cannot be read right now")
    })?;
    let sessions: Vec<Value> = sessions
        .into_iter()
        .map(|session| {
            json!({
                "key": session.key,
                "sessionId": session.session_id,
                "updatedAt": session.updated_at,
                "inputTokens": session.usage.input_tokens,
                "outputTokens": session.usage.output_tokens,
            })
        })
        .collect();
    Ok(json!({ "sessions": sessions }))
}
