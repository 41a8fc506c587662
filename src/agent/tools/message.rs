//! `message`: send text to a chat — the current one, or another the agent names — with a
//! file if it likes (`media`: a workspace path or a URL, see [`crate::media::Outgoing`]);
//! the text is then the file's caption, cut to the channel's caption limit with the rest
//! sent after it.
//!
//! What the tool sent is recorded ([`ToolSend`]), so the reply pipeline can avoid
//! repeating it (messaging-tool dedup, SPEC §7): only successful sends are recorded.

use async_trait::async_trait;
use std::sync::Arc;

use ferry_channel::{Channel, ChannelError, ChatKind, ChatRef, OutboundMessage, SentMessage, Target};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{Origin, ToolContext, ToolError, ToolOutput, TypedTool};
use crate::reply::attachments::{FileLimits, split_caption};
use crate::reply::directive::{self, ReplyTarget};

/// A message the tool delivered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSend {
    pub channel: String,
    pub account_id: String,
    pub target: Target,
    pub text: String,
    pub message_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MessageArgs {
    /// The text to send; with `media`, its caption (may then be empty).
    #[serde(default)]
    pub text: String,
    /// A file to send: a path in your workspace, or an http(s) URL. Images arrive as
    /// photos, other files as documents.
    #[serde(default)]
    pub media: Option<String>,
    /// Channel to send on (telegram, discord, slack, webchat). Default: the current chat's.
    #[serde(default)]
    pub channel: Option<String>,
    /// The chat to send to, as `direct:<id>`, `group:<id>`, `channel:<id>` or a bare id.
    /// Default: the current chat.
    #[serde(default)]
    pub to: Option<String>,
    /// A thread or topic inside the chat.
    #[serde(default)]
    pub thread_id: Option<String>,
    /// The bot account, when the channel has several.
    #[serde(default)]
    pub account_id: Option<String>,
}

pub struct MessageTool;

#[async_trait]
impl TypedTool for MessageTool {
    type Args = MessageArgs;
    const NAME: &'static str = "message";
    const DESCRIPTION: &'static str = "Send a chat message, optionally with a file (`media`: a workspace path or \
         an http(s) URL; `text` is then its caption). Without `channel` and `to` it goes to the current chat; with \
         them, to another chat. Use it to deliver something separately from your reply; do not repeat its text in \
         your reply.";
    const MUTATES: bool = true;

    async fn run(&self, args: MessageArgs, context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let media = args.media.as_deref().map(str::trim).filter(|media| !media.is_empty());
        if args.text.trim().is_empty() && media.is_none() {
            return Err(ToolError::new("`text` is empty; there is nothing to send"));
        }
        let (channel_name, account_id, target) = resolve_target(&args, context.origin.as_ref())?;
        let channel = context.channels.get(&channel_name, account_id.as_deref()).ok_or_else(|| {
            let connected = context.channels.describe();
            ToolError::new(format!(
                "channel `{channel_name}` is not connected (connected: {})",
                if connected.is_empty() { "none".to_owned() } else { connected.join(", ") }
            ))
        })?;
        // Reply directives are for Ferry, never for the reader: a tag is taken out, and a
        // `[[reply_to: <id>]]` threads the message where the channel can.
        let stripped = directive::strip(&args.text);
        let text = stripped.text.trim().to_owned();
        if text.is_empty() && media.is_none() {
            return Err(ToolError::new("`text` holds only reply directives; there is nothing to send"));
        }
        let file = match media {
            Some(named) => {
                let outgoing = context.outgoing.as_ref().ok_or_else(|| ToolError::new("files cannot be sent here"))?;
                let file = outgoing.attach(named, &context.session_key).await?;
                let files = FileLimits::of(channel.capabilities());
                if let Some(refusal) = files.refusal(&file) {
                    return Err(ToolError::new(format!("not sent: {refusal}")));
                }
                Some((file, files.caption_limit))
            }
            None => None,
        };
        let (caption, rest) = match &file {
            Some((_, caption_limit)) => split_caption(&text, *caption_limit),
            None => (text.clone(), None),
        };
        let mut outbound = OutboundMessage::text(target.clone(), caption);
        if let Some(ReplyTarget::Message(id)) = stripped.directives.reply_to
            && channel.capabilities().supports_reply_to
        {
            outbound.reply_to_message_id = Some(id);
        }
        // Named by the reply and the call when the ledger records it: the call is recorded
        // before it is made, so a run resumed after a crash makes it again under the same
        // id, and the send is reconciled.
        let key = match &context.send_ledger {
            Some(ledger) => ledger.message_key(&context.call_id),
            None => format!("{}:{}", context.run_id, context.call_id),
        };
        outbound.idempotency_key = Some(key.clone());
        outbound.attachments.extend(file.map(|(file, _)| file));
        let sent = send(context, &channel, outbound)
            .await
            .map_err(|error| ToolError::new(format!("sending failed: {error}")))?;
        if let Some(rest) = rest {
            let mut more = OutboundMessage::text(target.clone(), rest);
            more.idempotency_key = Some(format!("{key}:rest"));
            send(context, &channel, more)
                .await
                .map_err(|error| ToolError::new(format!("sending the rest of the caption failed: {error}")))?;
        }
        let send = ToolSend {
            channel: channel.name().to_owned(),
            account_id: channel.account_id().to_owned(),
            target: target.clone(),
            text,
            message_id: sent.message_id.clone(),
        };
        context.sends.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(send);
        Ok(json!({ "ok": true, "messageId": sent.message_id, "channel": channel.name(), "to": target.chat.id })
            .to_string()
            .into())
    }
}

/// Sends through the account's outbound scheduler (its rate limits, 429s and retries),
/// shared with the replies, when the run has one, and under the delivery ledger when the
/// reply is recorded.
async fn send(
    context: &ToolContext,
    channel: &Arc<dyn Channel>,
    message: OutboundMessage,
) -> Result<SentMessage, ChannelError> {
    match (&context.schedulers, &context.send_ledger) {
        (Some(schedulers), Some(ledger)) => {
            Ok(ledger.send(&schedulers.for_channel(channel), message).await?.message().clone())
        }
        (Some(schedulers), None) => schedulers.for_channel(channel).send(message).await,
        (None, _) => channel.send(message).await,
    }
}

/// Where to send: explicit arguments win; anything not given comes from the current chat.
fn resolve_target(args: &MessageArgs, origin: Option<&Origin>) -> Result<(String, Option<String>, Target), ToolError> {
    let channel = args
        .channel
        .clone()
        .or_else(|| origin.map(|o| o.channel.clone()))
        .ok_or_else(|| ToolError::new("there is no current chat to reply to; give `channel` and `to`"))?;
    let same_channel = origin.filter(|o| o.channel == channel);
    let account = args.account_id.clone().or_else(|| same_channel.map(|o| o.account_id.clone()));
    let target = match &args.to {
        Some(to) => {
            let default_kind = same_channel.map_or(ChatKind::Direct, |o| o.target.chat.kind);
            Target { chat: parse_chat(to, default_kind)?, thread_id: args.thread_id.clone() }
        }
        None => {
            let origin =
                same_channel.ok_or_else(|| ToolError::new(format!("give `to`: which chat on `{channel}`?")))?;
            Target {
                chat: origin.target.chat.clone(),
                thread_id: args.thread_id.clone().or(origin.target.thread_id.clone()),
            }
        }
    };
    Ok((channel, account, target))
}

/// A chat written as `direct:<id>`, `group:<id>`, `channel:<id>`, or a bare id of
/// `default_kind`.
pub(crate) fn parse_chat(to: &str, default_kind: ChatKind) -> Result<ChatRef, ToolError> {
    let (kind, id) = match to.split_once(':') {
        Some(("direct", id)) => (ChatKind::Direct, id),
        Some(("group", id)) => (ChatKind::Group, id),
        Some(("channel", id)) => (ChatKind::Channel, id),
        _ => (default_kind, to),
    };
    if id.trim().is_empty() {
        return Err(ToolError::new(format!("`to` ({to:?}) names no chat id")));
    }
    Ok(ChatRef::new(kind, id.trim()))
}
