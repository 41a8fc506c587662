//! The Bot API as served over HTTP: `{url}/bot{TOKEN}/{method}`, one function per method.
//!
//! Every call is recorded first, then the token is checked, then a scripted fault (if any) is
//! applied, then the method runs (and its answer may still be thrown away, see
//! `FakeTelegram::apply_then_drop_next`). Method names match case-insensitively because teloxide sends
//! `SendMessage` where the documentation says `sendMessage`. Answers are the Bot API envelope:
//! `{"ok":true,"result":…}` or `{"ok":false,"error_code":N,"description":"…"}`.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::DefaultBodyLimit;
use axum::extract::{Path, State as AxumState};
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::faults::Fault;
use super::params::Params;
use super::state::{GENERAL_TOPIC_ID, State, StoredMessage, Webhook, unix_now};
use super::uploads::{self, Upload};
use super::{BotCommand, Call, CallOutcome, ChatAction, SentMessage, Shared, lock};
use super::{files, html};

/// Telegram's limit on a message's text after entity parsing.
pub(crate) const TEXT_LIMIT: usize = 4096;

/// Longest long poll Telegram honours, in seconds.
const MAX_POLL_TIMEOUT: u64 = 50;

/// Actions `sendChatAction` accepts.
const CHAT_ACTIONS: &[&str] = &[
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
];

/// The canonical spelling of each method the fake serves, keyed by its lowercase name.
const METHODS: &[&str] = &[
    "getMe",
    "getUpdates",
    "setWebhook",
    "deleteWebhook",
    "getWebhookInfo",
    "sendMessage",
    "editMessageText",
    "deleteMessage",
    "sendChatAction",
    "setMyCommands",
    "getMyCommands",
    "deleteMyCommands",
    "getFile",
    "sendPhoto",
    "sendDocument",
    "sendVoice",
    "sendAudio",
    "sendVideo",
];

/// `getUpdates` while a webhook is set.
const WEBHOOK_CONFLICT: &str =
    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first";

/// A waiting `getUpdates` ended by a newer one.
pub(crate) const POLL_CONFLICT: &str =
    "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running";

/// A failed call: status and Telegram's description.
pub(crate) struct ApiError {
    pub(crate) status: u16,
    pub(crate) description: String,
    pub(crate) retry_after: Option<u64>,
}

impl ApiError {
    pub(crate) fn new(status: u16, description: impl Into<String>) -> Self {
        Self { status, description: description.into(), retry_after: None }
    }

    pub(crate) fn bad_request(detail: &str) -> Self {
        Self::new(400, format!("Bad Request: {detail}"))
    }

    /// What Telegram's frontends answer while its backend is unreachable.
    pub(crate) fn bad_gateway() -> Self {
        Self::new(502, "Bad Gateway")
    }

    pub(crate) fn too_many_requests(retry_after: u64) -> Self {
        let description = format!("Too Many Requests: retry after {retry_after}");
        Self { status: 429, description, retry_after: Some(retry_after) }
    }

    /// A body over the upload limit: what Telegram's front end answers (HTTP 413).
    pub(crate) fn entity_too_large() -> Self {
        Self::new(413, "Request Entity Too Large")
    }

    pub(crate) fn is_too_many_requests(&self) -> bool {
        self.status == 429
    }

    /// This error as a scripted fault for a later call.
    pub(crate) fn into_fault(self) -> Fault {
        Fault::Error { status: self.status, description: self.description, retry_after: self.retry_after }
    }
}

pub(crate) type MethodResult = Result<Value, ApiError>;

pub(crate) fn ok_response(result: Value) -> Response {
    (StatusCode::OK, axum::Json(json!({ "ok": true, "result": result }))).into_response()
}

pub(crate) fn error_response(error: &ApiError) -> Response {
    let mut body = json!({ "ok": false, "error_code": error.status, "description": error.description });
    if let Some(retry_after) = error.retry_after {
        body["parameters"] = json!({ "retry_after": retry_after });
    }
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, axum::Json(body)).into_response()
}

/// A `200 OK` whose JSON body stops short, as a truncating proxy leaves an answer.
pub(crate) fn malformed_response() -> Response {
    (StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], r#"{"ok":true,"result":[{"update_id":"#)
        .into_response()
}

/// A response whose body fails at once: the client sees the connection close mid-answer.
pub(crate) fn dropped_response() -> Response {
    let failed = futures::stream::once(async {
        Err::<Bytes, io::Error>(io::Error::new(io::ErrorKind::ConnectionAborted, "scripted dropped connection"))
    });
    Response::new(Body::from_stream(failed))
}

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/{bot}/{method}", any(handle))
        .route("/file/{bot}/{*path}", get(files::download))
        .fallback(not_found)
        // Uploads are read whole by `handle`, up to `uploads::BODY_LIMIT`, and refused with
        // Telegram's own 413 answer beyond it, not axum's default 2 MB plain-text one.
        .layer(DefaultBodyLimit::disable())
        .with_state(shared)
}

async fn not_found() -> Response {
    error_response(&ApiError::new(404, "Not Found"))
}

fn canonical_method(method: &str) -> String {
    METHODS
        .iter()
        .find(|known| known.eq_ignore_ascii_case(method))
        .map_or_else(|| method.to_owned(), |known| (*known).to_owned())
}

async fn handle(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let method = canonical_method(&method);
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|value| value.to_str().ok());
    let parsed = match axum::body::to_bytes(body, uploads::BODY_LIMIT).await {
        Err(_) => Err(ParseFailure::TooLarge),
        Ok(body) if uploads::is_multipart(content_type) => {
            uploads::parse(uri.query(), content_type.unwrap_or_default(), body).await.map_err(ParseFailure::Invalid)
        }
        Ok(body) => Params::parse(uri.query(), content_type, &body)
            .map(|params| (params, Vec::new()))
            .map_err(ParseFailure::Invalid),
    };
    let params_json = parsed.as_ref().map(|(params, _)| params.to_value()).unwrap_or(Value::Null);
    let call = Call { method: method.clone(), params: params_json, at: Instant::now(), outcome: CallOutcome::InFlight };
    let index = shared.record(call);

    let (outcome, response) = answer(&shared, &bot, &method, parsed).await;
    shared.finish(index, outcome);
    response
}

/// Why a request's parameters could not be read.
pub(crate) enum ParseFailure {
    /// The body is over [`uploads::BODY_LIMIT`]: Telegram's front end answers 413.
    TooLarge,
    /// Anything else, with the description to answer.
    Invalid(String),
}

/// A call's parameters and the files uploaded with it.
type Parsed = Result<(Params, Vec<Upload>), ParseFailure>;

/// Runs one call through the token check, a scripted fault and the method.
async fn answer(shared: &Arc<Shared>, bot: &str, method: &str, parsed: Parsed) -> (CallOutcome, Response) {
    if bot.strip_prefix("bot") != Some(shared.token.as_str()) {
        let error =
            if bot.starts_with("bot") { ApiError::new(401, "Unauthorized") } else { ApiError::new(404, "Not Found") };
        return (CallOutcome::Answered(error.status), error_response(&error));
    }
    let key = method.to_ascii_lowercase();
    let fault = lock(&shared.state).faults.take(&key);
    let mut drop_answer = false;
    match fault {
        Some(Fault::Drop) => return (CallOutcome::Dropped, dropped_response()),
        Some(Fault::Malformed) => return (CallOutcome::Malformed, malformed_response()),
        Some(Fault::Error { status, description, retry_after }) => {
            let error = ApiError { status, description, retry_after };
            shared.count_if_rate_limited(&error);
            return (CallOutcome::Answered(status), error_response(&error));
        }
        Some(Fault::Delay(delay)) => tokio::time::sleep(delay).await,
        Some(Fault::ApplyThenDrop) => drop_answer = true,
        None => {}
    }
    let result = run_method(shared, &key, parsed).await;
    if drop_answer {
        // The method ran and its effects stay; only the answer is lost on the way back (so a
        // refusal it produced is not counted as served either).
        let status = result.as_ref().map_or_else(|error| error.status, |_| 200);
        return (CallOutcome::AppliedThenDropped(status), dropped_response());
    }
    match result {
        Ok(result) => (CallOutcome::Answered(200), ok_response(result)),
        Err(error) => {
            shared.count_if_rate_limited(&error);
            (CallOutcome::Answered(error.status), error_response(&error))
        }
    }
}

/// Runs one method on the fake's state: its result or its refusal.
async fn run_method(shared: &Arc<Shared>, key: &str, parsed: Parsed) -> MethodResult {
    let (params, uploaded) = parsed.map_err(|failure| match failure {
        ParseFailure::TooLarge => ApiError::entity_too_large(),
        ParseFailure::Invalid(description) => ApiError::new(400, description),
    })?;
    match key {
        "getupdates" => get_updates(shared, &params).await,
        _ => {
            let mut state = lock(&shared.state);
            match key {
                "getme" => Ok(get_me(&state)),
                "setwebhook" => set_webhook(&mut state, &params),
                "deletewebhook" => Ok(delete_webhook(&mut state, &params)),
                "getwebhookinfo" => Ok(webhook_info(&state)),
                "sendmessage" => send_message(&mut state, &params),
                "editmessagetext" => edit_message_text(&mut state, &params),
                "deletemessage" => delete_message(&mut state, &params),
                "sendchataction" => send_chat_action(&mut state, &params),
                "setmycommands" => set_my_commands(&mut state, &params),
                "getmycommands" => Ok(commands_json(&state.commands)),
                "getfile" => files::get_file(&state, &params),
                "sendphoto" | "senddocument" | "sendvoice" | "sendaudio" | "sendvideo" => {
                    uploads::send_media(&mut state, key, &params, &uploaded)
                }
                "deletemycommands" => {
                    state.commands.clear();
                    Ok(Value::Bool(true))
                }
                _ => Err(ApiError::new(404, "Not Found")),
            }
        }
    }
}

fn get_me(state: &State) -> Value {
    let mut me = state.bot.to_json();
    me["can_join_groups"] = true.into();
    me["can_read_all_group_messages"] = false.into();
    me["supports_inline_queries"] = false.into();
    me["can_connect_to_business"] = false.into();
    me["has_main_web_app"] = false.into();
    me
}

fn set_webhook(state: &mut State, params: &Params) -> MethodResult {
    let url = params.str("url").unwrap_or_default().to_owned();
    if params.bool("drop_pending_updates") == Some(true) {
        state.pending.clear();
    }
    state.webhook = if url.is_empty() { None } else { Some(Webhook { url }) };
    Ok(Value::Bool(true))
}

fn delete_webhook(state: &mut State, params: &Params) -> Value {
    if params.bool("drop_pending_updates") == Some(true) {
        state.pending.clear();
    }
    state.webhook = None;
    Value::Bool(true)
}

fn webhook_info(state: &State) -> Value {
    json!({
        "url": state.webhook.as_ref().map(|webhook| webhook.url.as_str()).unwrap_or(""),
        "has_custom_certificate": false,
        "pending_update_count": state.pending.len(),
    })
}

/// `getUpdates`: confirm below `offset`, then answer at once if anything is pending, else wait
/// up to `timeout` seconds for an update. A newer `getUpdates` ends this one with a 409, as on
/// Telegram, where the older request is the one terminated. A one-shot fault scripted for
/// `getUpdates` meanwhile ends the wait early, so it hits the next poll.
async fn get_updates(shared: &Arc<Shared>, params: &Params) -> MethodResult {
    let limit = params.int("limit").unwrap_or(100).clamp(1, 100) as usize;
    let timeout = Duration::from_secs(params.int("timeout").unwrap_or(0).clamp(0, MAX_POLL_TIMEOUT as i64) as u64);
    let deadline = Instant::now() + timeout;
    let mut changed = shared.updates_changed.subscribe();
    let mut closing = shared.closing.subscribe();
    let generation = {
        let mut state = lock(&shared.state);
        if state.webhook.is_some() {
            return Err(ApiError::new(409, WEBHOOK_CONFLICT));
        }
        if let Some(offset) = params.int("offset") {
            state.confirm(offset);
        }
        if let Some(allowed) = params.json("allowed_updates").and_then(|value| value.as_array().cloned()) {
            state.allowed_updates = Some(allowed.iter().filter_map(Value::as_str).map(str::to_owned).collect());
        }
        state.poll_generation += 1;
        state.poll_generation
    };
    shared.offset_changed();
    // Wake any older waiting poll so it sees it has been superseded.
    shared.notify_updates();
    changed.borrow_and_update();
    loop {
        {
            let mut state = lock(&shared.state);
            if state.poll_generation != generation {
                return Err(ApiError::new(409, POLL_CONFLICT));
            }
            let updates = state.deliverable(limit);
            let faulted = state.faults.queued_for("getupdates");
            if !updates.is_empty() || faulted || Instant::now() >= deadline || *closing.borrow() {
                return Ok(Value::Array(updates));
            }
        }
        tokio::select! {
            _ = changed.changed() => {}
            _ = closing.changed() => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
}

/// The chat a method names, or Telegram's "chat not found".
pub(crate) fn chat_id(params: &Params) -> Result<i64, ApiError> {
    match params.int("chat_id") {
        Some(id) => Ok(id),
        None if params.str("chat_id").is_some() => Err(ApiError::bad_request("chat not found")),
        None => Err(ApiError::bad_request("chat_id is empty")),
    }
}

/// Text after `parse_mode`: visible text, entities, and the mode as given.
pub(crate) struct Rendered {
    pub(crate) visible: String,
    pub(crate) entities: Vec<Value>,
    pub(crate) parse_mode: Option<String>,
}

/// Applies `parse_mode` (or explicit entities, from the `entities_field` parameter) to `text`:
/// a message's text or a file's caption, which Telegram parses alike.
pub(crate) fn render(text: &str, params: &Params, entities_field: &str) -> Result<Rendered, ApiError> {
    let parse_mode = params.str("parse_mode").filter(|mode| !mode.is_empty()).map(str::to_owned);
    let (visible, entities) = match parse_mode.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None => {
            let entities = params.json(entities_field).and_then(|value| value.as_array().cloned()).unwrap_or_default();
            (text.to_owned(), entities)
        }
        Some("html") => {
            let formatted = html::parse(text)
                .map_err(|detail| ApiError::bad_request(&format!("can't parse entities: {detail}")))?;
            (formatted.text, formatted.entities)
        }
        // Markdown is passed through unchecked: Ferry sends HTML.
        Some("markdown" | "markdownv2") => (text.to_owned(), Vec::new()),
        Some(_) => {
            return Err(ApiError::bad_request(&format!(
                "unsupported parse_mode \"{}\"",
                parse_mode.unwrap_or_default()
            )));
        }
    };
    Ok(Rendered { visible, entities, parse_mode })
}

/// Applies `parse_mode` (or explicit `entities`) and Telegram's text checks.
fn render_text(params: &Params) -> Result<Rendered, ApiError> {
    let rendered = render(params.str("text").unwrap_or_default(), params, "entities")?;
    if rendered.visible.trim().is_empty() {
        return Err(ApiError::bad_request("message text is empty"));
    }
    if html::utf16_len(&rendered.visible) > TEXT_LIMIT {
        return Err(ApiError::bad_request("message is too long"));
    }
    Ok(rendered)
}

/// Where a new bot message goes: its forum topic and the message it replies to.
pub(crate) struct Placement {
    pub(crate) chat_id: i64,
    pub(crate) thread_id: Option<i64>,
    /// The replied-to message, as embedded in `reply_to_message`.
    pub(crate) reply: Option<Value>,
}

/// Checks the chat, `message_thread_id` and reply parameters of a send, as Telegram does
/// for `sendMessage` and every `send<Media>`.
pub(crate) fn placement(state: &State, params: &Params) -> Result<Placement, ApiError> {
    let chat_id = chat_id(params)?;
    let Some(chat) = state.chats.get(&chat_id) else { return Err(ApiError::bad_request("chat not found")) };
    let thread_id = params.int("message_thread_id").filter(|_| chat.is_forum());
    if let Some(thread_id) = thread_id
        && (thread_id == GENERAL_TOPIC_ID || !chat.topics.contains(&thread_id))
    {
        return Err(ApiError::bad_request("message thread not found"));
    }
    let reply_parameters = params.json("reply_parameters");
    let reply_to = reply_parameters
        .as_ref()
        .and_then(|reply| reply.get("message_id").and_then(Value::as_i64))
        .or_else(|| params.int("reply_to_message_id"));
    let allow_without_reply = reply_parameters
        .as_ref()
        .and_then(|reply| reply.get("allow_sending_without_reply").and_then(Value::as_bool))
        .or_else(|| params.bool("allow_sending_without_reply"))
        .unwrap_or(false);
    let reply = reply_to.and_then(|message_id| state.reply_copy(chat_id, message_id));
    if reply_to.is_some() && reply.is_none() && !allow_without_reply {
        return Err(ApiError::bad_request("message to be replied not found"));
    }
    Ok(Placement { chat_id, thread_id, reply })
}

/// Counts a new bot message against flood control, then stores it: the common fields (id,
/// topic, sender, chat, date, reply) plus what `fill` adds (text or media). `sent` is what
/// tests read back; its ids are filled in here.
pub(crate) fn store_bot_message(
    state: &mut State,
    placement: Placement,
    params: &Params,
    fill: impl FnOnce(&mut Map<String, Value>),
    mut sent: SentMessage,
) -> MethodResult {
    let Placement { chat_id, thread_id, reply } = placement;
    state.admit(chat_id).map_err(ApiError::too_many_requests)?;

    let bot = state.bot.to_json();
    let Some(chat) = state.chats.get_mut(&chat_id) else { return Err(ApiError::bad_request("chat not found")) };
    let message_id = chat.take_message_id();
    let mut message = Map::new();
    message.insert("message_id".into(), message_id.into());
    if let Some(thread_id) = thread_id {
        message.insert("message_thread_id".into(), thread_id.into());
        message.insert("is_topic_message".into(), true.into());
    }
    message.insert("from".into(), bot);
    message.insert("chat".into(), chat.json.clone());
    message.insert("date".into(), unix_now().into());
    if let Some(reply) = &reply {
        message.insert("reply_to_message".into(), reply.clone());
    }
    fill(&mut message);
    if let Some(markup) = params.json("reply_markup").filter(|markup| markup.get("inline_keyboard").is_some()) {
        message.insert("reply_markup".into(), markup);
    }
    let message = Value::Object(message);
    sent.chat_id = chat_id;
    sent.message_id = message_id;
    sent.thread_id = thread_id;
    sent.reply_to = reply.and_then(|reply| reply["message_id"].as_i64());
    chat.messages.insert(message_id, StoredMessage { json: message.clone(), sent: Some(sent) });
    state.sent_order.push((chat_id, message_id));
    Ok(message)
}

fn send_message(state: &mut State, params: &Params) -> MethodResult {
    let chat_id = chat_id(params)?;
    if !state.chats.contains_key(&chat_id) {
        return Err(ApiError::bad_request("chat not found"));
    }
    let rendered = render_text(params)?;
    let placement = placement(state, params)?;
    let visible = rendered.visible.clone();
    let entities = rendered.entities;
    let sent = SentMessage {
        chat_id,
        message_id: 0,
        thread_id: None,
        reply_to: None,
        text: params.str("text").unwrap_or_default().to_owned(),
        visible_text: rendered.visible,
        parse_mode: rendered.parse_mode,
        edits: 0,
        media: None,
    };
    let fill = |message: &mut Map<String, Value>| {
        message.insert("text".into(), visible.into());
        if !entities.is_empty() {
            message.insert("entities".into(), entities.into());
        }
    };
    store_bot_message(state, placement, params, fill, sent)
}

fn message_id(params: &Params) -> Result<i64, ApiError> {
    if params.str("inline_message_id").is_some() {
        return Err(ApiError::bad_request("inline messages are not supported by the fake Telegram"));
    }
    params.int("message_id").ok_or_else(|| ApiError::bad_request("message identifier is not specified"))
}

fn edit_message_text(state: &mut State, params: &Params) -> MethodResult {
    let chat_id = chat_id(params)?;
    let message_id = message_id(params)?;
    let Some(chat) = state.chats.get(&chat_id) else { return Err(ApiError::bad_request("chat not found")) };
    let Some(stored) = chat.messages.get(&message_id) else {
        return Err(ApiError::bad_request("message to edit not found"));
    };
    if stored.sent.is_none() {
        return Err(ApiError::bad_request("message can't be edited"));
    }
    let rendered = render_text(params)?;
    let entities = if rendered.entities.is_empty() { Value::Null } else { Value::from(rendered.entities.clone()) };
    let markup = params.json("reply_markup").filter(|markup| markup.get("inline_keyboard").is_some());
    let unchanged = stored.json["text"] == rendered.visible.as_str()
        && stored.json.get("entities").cloned().unwrap_or(Value::Null) == entities
        && stored.json.get("reply_markup").cloned() == markup;
    if unchanged {
        return Err(ApiError::bad_request(
            "message is not modified: specified new message content and reply markup are exactly the same as a \
             current content and reply markup of the message",
        ));
    }

    state.admit(chat_id).map_err(ApiError::too_many_requests)?;

    let Some(stored) = state.chats.get_mut(&chat_id).and_then(|chat| chat.messages.get_mut(&message_id)) else {
        return Err(ApiError::bad_request("message to edit not found"));
    };
    let Some(object) = stored.json.as_object_mut() else {
        return Err(ApiError::bad_request("message can't be edited"));
    };
    object.insert("text".into(), rendered.visible.clone().into());
    match entities {
        Value::Null => object.remove("entities"),
        entities => object.insert("entities".into(), entities),
    };
    match markup {
        Some(markup) => object.insert("reply_markup".into(), markup),
        None => object.remove("reply_markup"),
    };
    object.insert("edit_date".into(), unix_now().into());
    if let Some(sent) = &mut stored.sent {
        sent.text = params.str("text").unwrap_or_default().to_owned();
        sent.visible_text = rendered.visible;
        sent.parse_mode = rendered.parse_mode;
        sent.edits += 1;
    }
    Ok(stored.json.clone())
}

fn delete_message(state: &mut State, params: &Params) -> MethodResult {
    let chat_id = chat_id(params)?;
    let message_id = message_id(params)?;
    let Some(chat) = state.chats.get_mut(&chat_id) else { return Err(ApiError::bad_request("chat not found")) };
    if chat.messages.remove(&message_id).is_none() {
        return Err(ApiError::bad_request("message to delete not found"));
    }
    Ok(Value::Bool(true))
}

fn send_chat_action(state: &mut State, params: &Params) -> MethodResult {
    let chat_id = chat_id(params)?;
    if !state.chats.contains_key(&chat_id) {
        return Err(ApiError::bad_request("chat not found"));
    }
    let action = params.str("action").unwrap_or_default();
    if !CHAT_ACTIONS.contains(&action) {
        return Err(ApiError::bad_request("wrong parameter action in request"));
    }
    let thread_id = params.int("message_thread_id");
    state.chat_actions.push(ChatAction { chat_id, action: action.to_owned(), thread_id });
    Ok(Value::Bool(true))
}

fn set_my_commands(state: &mut State, params: &Params) -> MethodResult {
    let Some(Value::Array(list)) = params.json("commands") else {
        return Err(ApiError::bad_request("parameter \"commands\" is required"));
    };
    let mut commands = Vec::with_capacity(list.len());
    for entry in &list {
        let command = entry.get("command").and_then(Value::as_str).unwrap_or_default();
        let description = entry.get("description").and_then(Value::as_str).unwrap_or_default();
        let valid_name = (1..=32).contains(&command.len())
            && command.chars().all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_');
        if !valid_name {
            return Err(ApiError::bad_request("BOT_COMMAND_INVALID"));
        }
        if !(1..=256).contains(&description.chars().count()) {
            return Err(ApiError::bad_request("command description must be non-empty"));
        }
        commands.push(BotCommand { command: command.to_owned(), description: description.to_owned() });
    }
    state.commands = commands;
    Ok(Value::Bool(true))
}

fn commands_json(commands: &[BotCommand]) -> Value {
    commands.iter().map(|command| json!({ "command": command.command, "description": command.description })).collect()
}
