//! Outbound files: a message with an attachment, sent through Slack's external upload flow
//! (the old `files.upload` is retired and answers `method_deprecated`):
//!
//! 1. `files.getUploadURLExternal` (`filename`, `length`) → `upload_url`, `file_id`;
//! 2. the file's bytes are POSTed to `upload_url`, streamed from disk (no bot token: the URL
//!    is pre-signed, and it must be on Slack's hosts like every file URL);
//! 3. `files.completeUploadExternal` (`files=[{id, title}]`, `channel_id`, `thread_ts`,
//!    `initial_comment` = the message's text) shares the file in a message.
//!
//! **The message id.** Slack shares files asynchronously: the share message's `ts` is in the
//! answer's `files[0].shares.{public|private}[channel]` when Slack has it already, else it is
//! asked for with `files.info` a few times over about two seconds ([`SHARE_POLL`]). If Slack
//! still has not reported it, the file id (`F…`) stands for the message. Edits and deletes
//! follow from that: a share `ts` is an ordinary message (`chat.update` edits its comment,
//! `chat.delete` removes it); a file id cannot be edited (Rejected) and is deleted with
//! `files.delete`, which removes the file and its share.
//!
//! **Reconciliation** ([`Channel::find_sent`](ferry_channel::Channel::find_sent)). A share
//! message carries no message metadata (`files.completeUploadExternal` takes none), so the
//! metadata lookup of text sends cannot find it. Instead the adapter remembers, per
//! idempotency key, the file it uploaded ([`REMEMBERED_UPLOADS`] of them) and asks
//! `files.info` whether that file is shared in the target conversation: if so, that share is
//! the message; if the file was never completed or is not (yet) shared there, it is reported
//! not found, and the core sends again. That memory does not survive a restart, so the core
//! uploads a message's files ahead of its send ([`Uploads::upload_ahead`]) and records their
//! ids: a send repeated after a restart carries them (`Attachment::uploaded`), is looked up
//! by them, and if the share is not there, shares those files instead of uploading new ones.
//! Slack forgets an upload left unshared for long: if sharing answers `file_not_found` and
//! `files.info` does not know the file either, the files are uploaded again and shared.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use ferry_channel::{Attachment, ChannelError, SentMessage};
use reqwest::header::{CONTENT_LENGTH, CONTENT_TYPE, RETRY_AFTER};
use serde::Deserialize;
use serde_json::Value;
use slack_morphism::api::{
    SlackApiFilesComplete, SlackApiFilesCompleteUploadExternalRequest, SlackApiFilesDeleteRequest,
    SlackApiFilesGetUploadUrlExternalRequest,
};
use slack_morphism::errors::SlackClientError;
use slack_morphism::hyper_tokio::SlackClientHyperHttpsConnector;
use slack_morphism::{SlackChannelId, SlackFileId, SlackTs};
use tracing::info;

use crate::CHANNEL_NAME;
use crate::error::{channel_error, file_status_error, file_transport_error};
use crate::hosts::SlackHosts;

/// Waits before each `files.info` asking for a new file's share message: about two seconds
/// in all, which a reply can afford once per file.
pub(crate) const SHARE_POLL: [Duration; 3] =
    [Duration::from_millis(250), Duration::from_millis(500), Duration::from_millis(1000)];

/// Idempotency keys whose uploaded file is remembered for `find_sent`. The core asks within
/// a reply's delivery deadline, so only recent sends matter.
pub(crate) const REMEMBERED_UPLOADS: usize = 256;

/// The bytes of an upload may take this long at least…
const UPLOAD_TIMEOUT_BASE: Duration = Duration::from_secs(60);
/// …plus a second for each this many bytes (256 KiB/s, a slow uplink).
const UPLOAD_BYTES_PER_SECOND: u64 = 256 * 1024;

/// What an upload is called in error reasons.
const DOING: &str = "uploading a file to Slack";

type Session<'a> = slack_morphism::SlackClientSession<'a, SlackClientHyperHttpsConnector>;

/// One message with files, as [`Uploads::send`] needs it.
pub(crate) struct FileMessage<'a> {
    pub(crate) channel: &'a str,
    pub(crate) thread: Option<&'a str>,
    /// The text in Slack's syntax (already escaped or mrkdwn); empty for no comment.
    pub(crate) comment: String,
    pub(crate) attachments: &'a [Attachment],
    pub(crate) idempotency_key: Option<&'a str>,
}

/// The outbound file flow and its memory of recent uploads. See the [module docs](self).
pub(crate) struct Uploads {
    http: reqwest::Client,
    hosts: SlackHosts,
    remembered: Mutex<Remembered>,
}

/// The file uploaded for an idempotency key.
#[derive(Debug, Clone)]
struct Upload {
    file_id: String,
    channel: String,
    /// `files.completeUploadExternal` was sent: the file may be shared.
    completing: bool,
}

#[derive(Debug, Default)]
struct Remembered {
    by_key: HashMap<String, Upload>,
    order: VecDeque<String>,
}

/// The part of a file object read here: its id and where it is shared.
#[derive(Debug, Deserialize)]
struct SharedFile {
    id: String,
    #[serde(default)]
    shares: Value,
}

#[derive(Debug, Deserialize)]
struct Completed {
    #[serde(default)]
    files: Vec<SharedFile>,
}

#[derive(Debug, Deserialize)]
struct FileInfo {
    file: SharedFile,
}

impl Uploads {
    pub(crate) fn new(http: reqwest::Client, hosts: SlackHosts) -> Self {
        Self { http, hosts, remembered: Mutex::new(Remembered::default()) }
    }

    /// Uploads the message's files and shares them in one message with its text as the
    /// comment; returns the share message's `ts`, or the first file's id (module docs).
    pub(crate) async fn send(
        &self,
        session: &Session<'_>,
        message: &FileMessage<'_>,
    ) -> Result<SentMessage, ChannelError> {
        let length = message.comment.chars().count();
        let length = (length > 0).then_some(length);
        let files = self.files_to_share(session, message, false).await?;
        let first = files.first().map(|file| file.id.0.clone());
        let completed = match self.complete(session, message, files).await {
            Err(SlackClientError::ApiError(api)) if api.code == "file_not_found" && is_uploaded_ahead(message) => {
                // Completed already (by an attempt whose answer was lost, its share not shown
                // yet), or gone: Slack forgets an upload left unshared for too long.
                let file_id = first.unwrap_or_default();
                match self.poll_share(session, &file_id, message.channel, message.thread, &[Duration::ZERO]).await {
                    Ok(Some(ts)) => return Ok(SentMessage { message_id: ts }),
                    Ok(None) => return Ok(SentMessage { message_id: file_id }),
                    Err(SlackClientError::ApiError(api))
                        if matches!(api.code.as_str(), "file_not_found" | "file_deleted") =>
                    {
                        info!(channel = CHANNEL_NAME, chat_id = %message.channel, %file_id, "a file uploaded ahead of its send is gone from Slack; uploading it again");
                        let files = self.files_to_share(session, message, true).await?;
                        self.complete(session, message, files).await
                    }
                    Err(error) => return Err(channel_error(&error, length)),
                }
            }
            completed => completed,
        };
        let (completed, first) = completed.map_err(|error| channel_error(&error, length))?;
        let shared = completed.files.iter().find(|file| file.id == first);
        if let Some(ts) = shared.and_then(|file| share_ts(&file.shares, message.channel, message.thread)) {
            return Ok(SentMessage { message_id: ts });
        }
        match self.poll_share(session, &first, message.channel, message.thread, &SHARE_POLL).await {
            Ok(Some(ts)) => Ok(SentMessage { message_id: ts }),
            Ok(None) | Err(_) => {
                info!(channel = CHANNEL_NAME, chat_id = %message.channel, file_id = %first, "Slack has not reported the file's share message yet; the file id stands for it");
                Ok(SentMessage { message_id: first })
            }
        }
    }

    /// Steps 1 and 2 where they are still to do (for every file when `anew`: those uploaded
    /// ahead are gone), as the files step 3 shares.
    async fn files_to_share(
        &self,
        session: &Session<'_>,
        message: &FileMessage<'_>,
        anew: bool,
    ) -> Result<Vec<SlackApiFilesComplete>, ChannelError> {
        let mut files = Vec::with_capacity(message.attachments.len());
        for attachment in message.attachments {
            let (file_id, title) = match &attachment.uploaded {
                // Uploaded ahead (`upload_ahead`), maybe by a process that stopped since:
                // shared, not uploaded again.
                Some(file_id) if !anew => (file_id.clone(), title_of(attachment)),
                _ => self.upload(session, attachment).await?,
            };
            if files.is_empty()
                && let Some(key) = message.idempotency_key
            {
                self.remember(key, &file_id, message.channel);
            }
            files.push(SlackApiFilesComplete::new(SlackFileId(file_id)).with_title(title));
        }
        if files.is_empty() {
            return Err(ChannelError::Rejected { reason: "a file message without files".to_owned() });
        }
        Ok(files)
    }

    /// Step 3: shares `files` in one message; its answer, with the first file's id.
    async fn complete(
        &self,
        session: &Session<'_>,
        message: &FileMessage<'_>,
        files: Vec<SlackApiFilesComplete>,
    ) -> Result<(Completed, String), SlackClientError> {
        let first = files.first().map(|file| file.id.0.clone()).unwrap_or_default();
        if let Some(key) = message.idempotency_key {
            self.mark_completing(key);
        }
        let comment = Some(message.comment.clone()).filter(|text| !text.is_empty());
        let request = SlackApiFilesCompleteUploadExternalRequest::new(files)
            .with_channel_id(SlackChannelId(message.channel.to_owned()))
            .opt_thread_ts(message.thread.map(|ts| SlackTs(ts.to_owned())))
            .opt_initial_comment(comment);
        let completed = session.http_session_api.http_post("files.completeUploadExternal", &request, None).await?;
        Ok((completed, first))
    }

    /// Steps 1 and 2 for each file of a message that has not been uploaded yet, ahead of its
    /// send ([`Channel::upload_ahead`](ferry_channel::Channel::upload_ahead)): each
    /// attachment's `uploaded` is set to its file id.
    pub(crate) async fn upload_ahead(
        &self,
        session: &Session<'_>,
        attachments: &mut [Attachment],
    ) -> Result<(), ChannelError> {
        for attachment in attachments.iter_mut().filter(|attachment| attachment.uploaded.is_none()) {
            let (file_id, _) = self.upload(session, attachment).await?;
            attachment.uploaded = Some(file_id);
        }
        Ok(())
    }

    /// Steps 1 and 2 for one file: its id and title.
    async fn upload(&self, session: &Session<'_>, attachment: &Attachment) -> Result<(String, String), ChannelError> {
        let refused = |reason: String| ChannelError::Rejected { reason };
        let path = attachment
            .path
            .as_deref()
            .ok_or_else(|| refused("an outbound attachment has no local file to upload".to_owned()))?;
        let file = tokio::fs::File::open(path)
            .await
            .map_err(|error| refused(format!("cannot open the file to upload: {error}")))?;
        let length = file
            .metadata()
            .await
            .map_err(|error| refused(format!("cannot read the size of the file to upload: {error}")))?
            .len();
        let name = file_name(attachment, path);
        let request = SlackApiFilesGetUploadUrlExternalRequest::new(
            name.clone(),
            usize::try_from(length).map_err(|_| refused(format!("a file of {length} bytes is too large")))?,
        );
        let target = session.get_upload_url_external(&request).await.map_err(|error| channel_error(&error, None))?;
        let upload_url = target.upload_url.0;
        if !self.hosts.contains(&upload_url) {
            return Err(refused(format!(
                "Slack gave an upload URL off its hosts ({}); the file is not sent there",
                upload_url.host_str().unwrap_or("no host")
            )));
        }
        let mime = attachment.mime_type.clone().unwrap_or_else(|| "application/octet-stream".to_owned());
        let timeout = UPLOAD_TIMEOUT_BASE + Duration::from_secs(length / UPLOAD_BYTES_PER_SECOND);
        let body = reqwest::Body::wrap_stream(tokio_util::io::ReaderStream::new(file));
        let response = self
            .http
            .post(upload_url)
            .header(CONTENT_TYPE, mime)
            .header(CONTENT_LENGTH, length)
            .timeout(timeout)
            .body(body)
            .send()
            .await
            .map_err(|error| file_transport_error(error, DOING))?;
        let status = response.status();
        if !status.is_success() {
            let retry_after = response.headers().get(RETRY_AFTER).and_then(|value| value.to_str().ok());
            return Err(file_status_error(status.as_u16(), retry_after, DOING));
        }
        Ok((target.file_id.0, name))
    }

    /// The share message of a file this adapter uploaded for `key`, if Slack shows it in
    /// the target conversation (module docs, "Reconciliation").
    pub(crate) async fn find_sent(
        &self,
        session: &Session<'_>,
        key: &str,
        message: &FileMessage<'_>,
    ) -> Result<Option<SentMessage>, ChannelError> {
        let (channel, thread) = (message.channel, message.thread);
        // A file uploaded ahead is known by its id, in this process or after a restart;
        // otherwise only this process's memory knows what it uploaded.
        let file_id = match message.attachments.first().and_then(|attachment| attachment.uploaded.clone()) {
            Some(file_id) => file_id,
            None => {
                let Some(upload) = self.lock().by_key.get(key).cloned() else { return Ok(None) };
                if !upload.completing || upload.channel != channel {
                    return Ok(None);
                }
                upload.file_id
            }
        };
        let waits = [Duration::ZERO, SHARE_POLL[0], SHARE_POLL[1]];
        match self.poll_share(session, &file_id, channel, thread, &waits).await {
            Ok(found) => Ok(found.map(|message_id| SentMessage { message_id })),
            // Never completed (or deleted since): nothing is shown.
            Err(SlackClientError::ApiError(api)) if matches!(api.code.as_str(), "file_not_found" | "file_deleted") => {
                Ok(None)
            }
            Err(error) => Err(channel_error(&error, None)),
        }
    }

    /// Asks `files.info` after each wait until the file's share in `channel` shows.
    async fn poll_share(
        &self,
        session: &Session<'_>,
        file_id: &str,
        channel: &str,
        thread: Option<&str>,
        waits: &[Duration],
    ) -> Result<Option<String>, SlackClientError> {
        for wait in waits {
            tokio::time::sleep(*wait).await;
            let params = vec![("file", Some(file_id.to_owned()))];
            let info: FileInfo = session.http_session_api.http_get("files.info", &params, None).await?;
            if let Some(ts) = share_ts(&info.file.shares, channel, thread) {
                return Ok(Some(ts));
            }
        }
        Ok(None)
    }

    /// Deletes a file the adapter uploaded, and with it its share.
    pub(crate) async fn delete(&self, session: &Session<'_>, file_id: &str) -> Result<(), ChannelError> {
        let request = SlackApiFilesDeleteRequest::new(SlackFileId(file_id.to_owned()));
        session.files_delete(&request).await.map(drop).map_err(|error| channel_error(&error, None))
    }

    fn remember(&self, key: &str, file_id: &str, channel: &str) {
        let mut remembered = self.lock();
        let upload = Upload { file_id: file_id.to_owned(), channel: channel.to_owned(), completing: false };
        if remembered.by_key.insert(key.to_owned(), upload).is_none() {
            remembered.order.push_back(key.to_owned());
        }
        while remembered.order.len() > REMEMBERED_UPLOADS {
            if let Some(oldest) = remembered.order.pop_front() {
                remembered.by_key.remove(&oldest);
            }
        }
    }

    fn mark_completing(&self, key: &str) {
        if let Some(upload) = self.lock().by_key.get_mut(key) {
            upload.completing = true;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Remembered> {
        self.remembered.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Whether a message id is a file id standing for its share message (module docs). Slack
/// message ids are `ts` values (`1700000000.000100`); file ids are `F…` without a dot.
pub(crate) fn is_file_id(message_id: &str) -> bool {
    message_id.starts_with('F') && !message_id.contains('.')
}

/// Whether the message's files were uploaded ahead of this send.
fn is_uploaded_ahead(message: &FileMessage<'_>) -> bool {
    message.attachments.iter().any(|attachment| attachment.uploaded.is_some())
}

/// The title of a file uploaded ahead: its name, as [`file_name`] gave it at upload.
fn title_of(attachment: &Attachment) -> String {
    match &attachment.path {
        Some(path) => file_name(attachment, path),
        None => attachment.file_name.clone().unwrap_or_else(|| "file".to_owned()),
    }
}

/// The name Slack shows: the attachment's, else the local file's.
fn file_name(attachment: &Attachment, path: &Path) -> String {
    attachment
        .file_name
        .clone()
        .filter(|name| !name.trim().is_empty())
        .or_else(|| path.file_name().map(|name| name.to_string_lossy().into_owned()))
        .unwrap_or_else(|| "file".to_owned())
}

/// The `ts` of the file's share in `channel` (in `thread`, or top-level), from a file
/// object's `shares: {public|private: {channel: [{ts, thread_ts?}, …]}}`.
fn share_ts(shares: &Value, channel: &str, thread: Option<&str>) -> Option<String> {
    ["public", "private"]
        .iter()
        .filter_map(|visibility| shares.get(visibility)?.get(channel)?.as_array())
        .flatten()
        .filter_map(|share| {
            let ts = share.get("ts")?.as_str()?;
            let share_thread = share.get("thread_ts").and_then(Value::as_str);
            let placed = match thread {
                Some(thread) => share_thread == Some(thread) && ts != thread,
                // A top-level share has no thread_ts, or its own ts once it has replies.
                None => share_thread.is_none_or(|share_thread| share_thread == ts),
            };
            placed.then(|| ts.to_owned())
        })
        .next_back()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_share_in_the_target_thread_or_top_level_is_the_message() {
        let shares = json!({
            "public": {"C1": [
                {"ts": "1.000002", "channel_name": "general"},
                {"ts": "1.000005", "thread_ts": "1.000001"},
            ]},
            "private": {"D1": [{"ts": "2.000001", "thread_ts": "2.000001", "reply_count": 1}]},
        });
        assert_eq!(share_ts(&shares, "C1", None).as_deref(), Some("1.000002"));
        assert_eq!(share_ts(&shares, "C1", Some("1.000001")).as_deref(), Some("1.000005"));
        assert_eq!(share_ts(&shares, "D1", None).as_deref(), Some("2.000001"));
        assert_eq!(share_ts(&shares, "C2", None), None);
        assert_eq!(share_ts(&json!({}), "C1", None), None);
        assert_eq!(share_ts(&json!([]), "C1", None), None);
    }

    #[test]
    fn file_ids_are_told_from_message_ts() {
        assert!(is_file_id("F0123ABC"));
        assert!(!is_file_id("1700000000.000100"));
    }
}
