//! The built-in web chat as a channel like the others: what a gateway client sends with
//! `chat.send` or `agent` enters the dispatcher through [`WebChat`]'s inbound stream
//! (routing, commands, queue modes, dedupe all apply), and what the reply pipeline sends to
//! a web chat (command answers, notices, `message` tool sends, requests to approve a
//! command) reaches the client's connections as `chat` events. Run replies themselves reach
//! clients through the run's own `chat` events, so the channel declares
//! `replies_via_chat_events`. A request to approve a command is a message like the others;
//! its event also names the request ([`super::approvals`]), so the page can offer buttons.
//!
//! The page itself (`assets/`) is served by the gateway at `/`, the libraries it renders
//! Markdown with at `/vendor/` ([`vendor_file`]). Files travel over HTTP beside the socket
//! ([`files`]): a client uploads one, then names it in `chat.send`; files the agent sends
//! reach the page as `files` on `chat` events, and the page downloads them by id.

pub mod files;

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use axum::extract::Path;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use ferry_channel::{
    Ack, AckReceiver, Channel, ChannelCapabilities, ChannelError, InboundDelivery, InboundMessage, InboundStream,
    MarkupDialect, OutboundMessage, SentMessage,
};
use futures::StreamExt;
use tokio::sync::mpsc;

use super::hub::{Approved, Hub};
use crate::agent::tools::exec::Approvals;
use crate::media::FileInfo;

/// The channel's name in config, session keys and logs.
pub const CHANNEL_NAME: &str = "webchat";
/// The web chat has one account.
pub const ACCOUNT_ID: &str = "default";

/// Messages accepted from clients but not yet taken by the dispatcher.
const INBOUND_BACKLOG: usize = 1024;

/// The page and its assets, embedded in the binary: the gateway serves it with no files
/// on disk and no network.
pub mod assets {
    pub const INDEX_HTML: &str = include_str!("assets/index.html");
    pub const APP_JS: &str = include_str!("assets/app.js");
    pub const MARKDOWN_JS: &str = include_str!("assets/markdown.js");
    pub const MEDIA_JS: &str = include_str!("assets/media.js");
    pub const STYLE_CSS: &str = include_str!("assets/style.css");

    /// Third-party files the page loads from `/vendor/<name>`: the libraries as published
    /// on npm, pinned, and their licenses (versions and checksums in
    /// `assets/vendor/README.md`).
    pub const VENDOR: &[VendorFile] = &[
        VendorFile {
            name: "markdown-it.min.js",
            content_type: JAVASCRIPT,
            body: include_str!("assets/vendor/markdown-it.min.js"),
        },
        VendorFile {
            name: "markdown-it.LICENSE",
            content_type: TEXT,
            body: include_str!("assets/vendor/markdown-it.LICENSE"),
        },
        VendorFile {
            name: "purify.min.js",
            content_type: JAVASCRIPT,
            body: include_str!("assets/vendor/purify.min.js"),
        },
        VendorFile { name: "purify.LICENSE", content_type: TEXT, body: include_str!("assets/vendor/purify.LICENSE") },
    ];

    const JAVASCRIPT: &str = "text/javascript; charset=utf-8";
    const TEXT: &str = "text/plain; charset=utf-8";

    /// One file under `/vendor/`.
    pub struct VendorFile {
        pub name: &'static str,
        pub content_type: &'static str,
        pub body: &'static str,
    }

    /// The vendored file called `name`, if there is one.
    pub fn vendor(name: &str) -> Option<&'static VendorFile> {
        VENDOR.iter().find(|file| file.name == name)
    }
}

/// `GET /vendor/{file}`: a vendored library or its license, 404 for any other name.
pub async fn vendor_file(Path(name): Path<String>) -> Response {
    match assets::vendor(&name) {
        Some(file) => ([(header::CONTENT_TYPE, file.content_type)], file.body).into_response(),
        None => (StatusCode::NOT_FOUND, "no such file").into_response(),
    }
}

/// The web chat channel: clients' messages in, what the core sends to a web chat out.
pub struct WebChat {
    capabilities: ChannelCapabilities,
    hub: Arc<Hub>,
    /// Where a message's request to approve a command is looked up; `None` without the
    /// command tools.
    approvals: Option<Arc<Approvals>>,
    inbound: mpsc::Sender<InboundDelivery>,
    receiver: Mutex<Option<mpsc::Receiver<InboundDelivery>>>,
}

impl WebChat {
    pub fn new(hub: Arc<Hub>, approvals: Option<Arc<Approvals>>) -> Self {
        let (inbound, receiver) = mpsc::channel(INBOUND_BACKLOG);
        let capabilities = ChannelCapabilities {
            // The page renders Markdown itself (markdown-it) and shows any length.
            markup: MarkupDialect::Markdown,
            text_limit: 1_000_000,
            supports_edit: false,
            supports_delete: false,
            supports_typing: false,
            // Answers name the message they answer (its run id); see `send`.
            supports_reply_to: true,
            replies_via_chat_events: true,
            ..ChannelCapabilities::unrestricted()
        };
        Self { capabilities, hub, approvals, inbound, receiver: Mutex::new(Some(receiver)) }
    }

    /// Hands a client's message to the dispatcher. The receiver resolves once it was
    /// durably accepted (or abandoned).
    pub async fn submit(&self, message: InboundMessage) -> Result<AckReceiver, ChannelError> {
        let (ack, receiver) = Ack::pair();
        self.inbound.send(InboundDelivery { message, ack }).await.map_err(|_| ChannelError::Closed)?;
        Ok(receiver)
    }
}

#[async_trait]
impl Channel for WebChat {
    fn name(&self) -> &str {
        CHANNEL_NAME
    }

    fn account_id(&self) -> &str {
        ACCOUNT_ID
    }

    fn capabilities(&self) -> &ChannelCapabilities {
        &self.capabilities
    }

    async fn start(&self) -> Result<InboundStream, ChannelError> {
        let receiver = self.receiver.lock().unwrap_or_else(PoisonError::into_inner).take();
        let receiver =
            receiver.ok_or(ChannelError::Rejected { reason: "the web chat channel was already started".to_owned() })?;
        let stream = futures::stream::unfold(receiver, |mut receiver| async move {
            receiver.recv().await.map(|delivery| (delivery, receiver))
        });
        Ok(stream.boxed())
    }

    async fn send(&self, message: OutboundMessage) -> Result<SentMessage, ChannelError> {
        // An answer to a client's message (a command's reply, a notice about it) carries
        // that message's run id, so the client can tell what it answers.
        let id = message
            .reply_to_message_id
            .clone()
            .or_else(|| message.idempotency_key.clone())
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        // The core marks nothing: the message is a request when its key is a pending one's.
        let approval =
            message.idempotency_key.as_deref().and_then(|key| self.approvals.as_ref()?.pending_for_message(key)).map(
                |approval| Approved {
                    view: super::approvals::view(&approval),
                    session_key: approval.session_key.clone(),
                },
            );
        // A file is shown from the media store by its id; one that is not there (the core
        // stores every file it sends, so this is a bug elsewhere) is said, not dropped.
        let mut text = message.text.clone();
        let mut files = Vec::new();
        for attachment in &message.attachments {
            match FileInfo::of_attachment(attachment) {
                Some(file) => files.push(file),
                None => {
                    tracing::warn!(file = %attachment.reference, "a file sent to the web chat is not in the media store");
                    let name = attachment.file_name.as_deref().unwrap_or("a file");
                    text.push_str(&format!("\n\n({name} could not be shown here)"));
                }
            }
        }
        if !self.hub.notice(&message.target.chat.id, &id, text.trim_start(), files, approval) {
            // Nobody has that chat open: like a platform with no such chat.
            return Err(ChannelError::Rejected {
                reason: format!("no web chat client is connected as {}", message.target.chat.id),
            });
        }
        Ok(SentMessage { message_id: id })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_script_the_page_loads_from_vendor_is_embedded_with_a_license() {
        let page = assets::INDEX_HTML;
        let loaded: Vec<&str> = page.split("src=\"vendor/").skip(1).filter_map(|rest| rest.split('"').next()).collect();
        assert_eq!(loaded, ["markdown-it.min.js", "purify.min.js"], "the page loads both libraries, in this order");
        for name in loaded {
            let script = assets::vendor(name).unwrap_or_else(|| panic!("{name} is not embedded"));
            assert!(script.content_type.starts_with("text/javascript"), "{name}");
            let license = name.replace(".min.js", ".LICENSE");
            assert!(assets::vendor(&license).is_some_and(|file| !file.body.trim().is_empty()), "{license} is missing");
        }
        assert!(assets::vendor("../app.js").is_none() && assets::vendor("app.js").is_none(), "only vendored files");
    }
}
