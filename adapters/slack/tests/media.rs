//! Files both ways against the fake Slack: a shared file reaches the core as an attachment
//! and downloads with the bot token, which goes to Slack's hosts only and never into an
//! error or a log; a message with a file goes through the external upload flow, and its
//! message id, edits, deletes and reconciliation behave as `upload.rs` documents.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferry_channel::{
    Attachment, AttachmentKind, Channel, ChannelError, ChatKind, ChatRef, Download, MessageRef, OutboundMessage,
    Target, TextFormat,
};
use ferry_fakes::FakeSlack;
use ferry_slack::{SlackChannel, SlackConfig};
use futures::StreamExt;
use serde_json::Value;

mod common;
use common::{soon, started};

const PNG: &[u8] = b"\x89PNG\r\n\x1a\n fake image bytes \x00\x01\x02";

async fn connected(slack: &FakeSlack) -> SlackChannel {
    let mut config = SlackConfig::http(FakeSlack::BOT_TOKEN, FakeSlack::SIGNING_SECRET);
    config.api_url = slack.api_url();
    SlackChannel::connect(config).await.unwrap()
}

async fn bytes_of(download: Download) -> Result<Vec<u8>, ChannelError> {
    let mut body = download.body;
    let mut bytes = Vec::new();
    while let Some(chunk) = body.next().await {
        bytes.extend_from_slice(&chunk?);
    }
    Ok(bytes)
}

/// A user's PNG on `slack`, as an attachment the adapter would have made of it.
fn remote_png(slack: &FakeSlack) -> (Value, Attachment) {
    let file = slack.user_file("U1", "photo.png", "image/png", PNG.to_vec(), Some((640, 480)));
    let mut attachment = Attachment::remote(AttachmentKind::Image, file["url_private_download"].as_str().unwrap());
    attachment.mime_type = Some("image/png".to_owned());
    (file, attachment)
}

fn tokens_sent(slack: &FakeSlack, route: &str) -> Vec<Option<String>> {
    slack.calls_to(route).iter().map(|call| call.params["token"].as_str().map(str::to_owned)).collect()
}

#[tokio::test]
async fn a_shared_file_reaches_the_core_and_downloads_with_its_bytes() {
    let slack = FakeSlack::start().await.unwrap();
    let (channel, mut inbound) = started(&slack).await;
    let file = slack.user_file("U1", "photo.png", "image/png", PNG.to_vec(), Some((640, 480)));
    slack.file_share("DU1", "im", "U1", "what is this?", vec![file.clone()]);
    let delivery = soon(inbound.next()).await.unwrap();
    delivery.ack.accept();
    let message = delivery.message;
    assert_eq!((message.chat.kind, message.text.as_str()), (ChatKind::Direct, "what is this?"));
    let [attachment] = message.attachments.as_slice() else { panic!("{:?}", message.attachments) };
    assert_eq!(attachment.kind, AttachmentKind::Image);
    assert_eq!(attachment.reference, file["url_private_download"].as_str().unwrap());
    assert_eq!(
        (attachment.mime_type.as_deref(), attachment.file_name.as_deref()),
        (Some("image/png"), Some("photo.png"))
    );

    let download = channel.download(attachment).await.unwrap();
    assert_eq!(download.declared_len, Some(PNG.len() as u64));
    assert_eq!(bytes_of(download).await.unwrap(), PNG);
    assert_eq!(tokens_sent(&slack, FakeSlack::DOWNLOAD_ROUTE), [Some(FakeSlack::BOT_TOKEN.to_owned())]);
}

#[tokio::test]
async fn a_file_shared_without_text_still_reaches_the_core() {
    let slack = FakeSlack::start().await.unwrap();
    let (_channel, mut inbound) = started(&slack).await;
    let file = slack.user_file("U1", "notes.pdf", "application/pdf", b"%PDF-1.7".to_vec(), None);
    slack.file_share("C1", "channel", "U1", "", vec![file]);
    let message = soon(inbound.next()).await.unwrap().message;
    assert_eq!(message.text, "");
    assert_eq!(message.attachments[0].kind, AttachmentKind::Document);
}

#[tokio::test]
async fn a_file_url_off_slacks_hosts_is_refused_without_contacting_it() {
    let slack = FakeSlack::start().await.unwrap();
    let elsewhere = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    let (_, attachment) = remote_png(&elsewhere);
    let error = channel.download(&attachment).await.unwrap_err();
    assert!(matches!(&error, ChannelError::Rejected { reason } if reason.contains("not on Slack's hosts")), "{error}");
    assert!(elsewhere.calls_to(FakeSlack::DOWNLOAD_ROUTE).is_empty(), "nothing was sent off Slack's hosts");
}

#[tokio::test]
async fn a_redirect_off_slacks_hosts_is_followed_without_the_token() {
    let slack = FakeSlack::start().await.unwrap();
    let elsewhere = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    let (file, attachment) = remote_png(&slack);
    let (target, _) = remote_png(&elsewhere);
    slack.redirect_file(file["id"].as_str().unwrap(), target["url_private_download"].as_str().unwrap());
    // The other host, not given the token, answers the sign-in page.
    let error = channel.download(&attachment).await.unwrap_err();
    assert!(matches!(&error, ChannelError::Rejected { reason } if reason.contains("sign-in page")), "{error}");
    assert_eq!(tokens_sent(&slack, FakeSlack::DOWNLOAD_ROUTE), [Some(FakeSlack::BOT_TOKEN.to_owned())]);
    assert_eq!(tokens_sent(&elsewhere, FakeSlack::DOWNLOAD_ROUTE), [None]);
}

#[tokio::test]
async fn slacks_sign_in_page_is_rejected_with_a_reason() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    let (_, attachment) = remote_png(&slack);
    slack.revoke_file_access();
    let error = channel.download(&attachment).await.unwrap_err();
    let ChannelError::Rejected { reason } = &error else { panic!("{error:?}") };
    assert!(reason.contains("sign-in page") && reason.contains("files:read"), "{reason}");
}

#[tokio::test]
async fn download_failures_are_classified_for_the_core() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    let (_, attachment) = remote_png(&slack);
    slack.rate_limit_next(FakeSlack::DOWNLOAD_ROUTE, 1, 2);
    slack.fail_next_with_status(FakeSlack::DOWNLOAD_ROUTE, 503);
    slack.drop_next_before_apply(FakeSlack::DOWNLOAD_ROUTE);
    slack.fail_next(FakeSlack::DOWNLOAD_ROUTE, "file_not_found");
    let mut errors = Vec::new();
    for _ in 0..4 {
        errors.push(match channel.download(&attachment).await {
            Ok(download) => bytes_of(download).await.unwrap_err(),
            Err(error) => error,
        });
    }
    assert_eq!(errors[0], ChannelError::RateLimited { retry_after: Some(Duration::from_secs(2)) });
    assert!(matches!(errors[1], ChannelError::Transient { .. }), "{:?}", errors[1]);
    assert!(matches!(errors[2], ChannelError::Transient { .. }), "{:?}", errors[2]);
    assert!(matches!(errors[3], ChannelError::Rejected { .. }), "{:?}", errors[3]);
    // And then it works.
    assert_eq!(bytes_of(channel.download(&attachment).await.unwrap()).await.unwrap(), PNG);
}

/// Everything logged at any level while it is set, in text.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_bot_token_never_appears_in_errors_or_logs() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);

    let slack = FakeSlack::start().await.unwrap();
    let elsewhere = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    let (file, attachment) = remote_png(&slack);
    let (off_host, off_host_attachment) = remote_png(&elsewhere);
    let mut errors = Vec::new();
    errors.push(channel.download(&off_host_attachment).await.unwrap_err());
    slack.drop_next_before_apply(FakeSlack::DOWNLOAD_ROUTE);
    slack.fail_next_with_status(FakeSlack::DOWNLOAD_ROUTE, 500);
    errors.push(channel.download(&attachment).await.unwrap_err());
    errors.push(channel.download(&attachment).await.unwrap_err());
    slack.redirect_file(file["id"].as_str().unwrap(), off_host["url_private_download"].as_str().unwrap());
    errors.push(channel.download(&attachment).await.unwrap_err());
    slack.revoke_file_access();
    errors.push(channel.download(&attachment).await.unwrap_err());

    let logs = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(logs.contains("redirect"), "the capture works: {logs}");
    assert!(!logs.contains(FakeSlack::BOT_TOKEN), "the token was logged: {logs}");
    for error in &errors {
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(FakeSlack::BOT_TOKEN), "{shown}");
    }
}

// ---- Outbound ---------------------------------------------------------------------------------

fn target(channel: &str, thread: Option<&str>) -> Target {
    Target { chat: ChatRef::new(ChatKind::Channel, channel), thread_id: thread.map(str::to_owned) }
}

/// A message with `bytes` as a PNG attachment; keep the returned file alive while sending.
fn with_png(target: Target, text: &str, bytes: &[u8]) -> (OutboundMessage, tempfile::NamedTempFile) {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(bytes).unwrap();
    let mut attachment = Attachment::remote(AttachmentKind::Image, "chart");
    attachment.path = Some(file.path().to_owned());
    attachment.mime_type = Some("image/png".to_owned());
    attachment.file_name = Some("chart.png".to_owned());
    attachment.size_bytes = Some(bytes.len() as u64);
    let mut message = OutboundMessage::text(target, text);
    message.format = TextFormat::Markup;
    message.attachments.push(attachment);
    message.idempotency_key = Some("run-1:0".to_owned());
    (message, file)
}

#[tokio::test]
async fn a_file_goes_through_the_external_upload_flow_with_its_comment_in_the_thread() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    let (message, _file) = with_png(target("C1", Some("1700000000.000001")), "*the chart*", PNG);
    let sent = channel.send(message).await.unwrap();

    let [uploaded]: [_; 1] = slack.uploaded_files().try_into().unwrap();
    assert_eq!((uploaded.name.as_str(), uploaded.title.as_deref()), ("chart.png", Some("chart.png")));
    assert_eq!((uploaded.bytes.as_slice(), uploaded.mimetype.as_deref()), (PNG, Some("image/png")));
    assert_eq!((uploaded.channel.as_deref(), uploaded.thread_ts.as_deref()), (Some("C1"), Some("1700000000.000001")));
    assert_eq!(uploaded.comment.as_deref(), Some("*the chart*"), "mrkdwn goes as is");
    assert_eq!(Some(sent.message_id.as_str()), uploaded.ts.as_deref(), "the share message's ts");
    let shown = slack.messages_in("C1");
    assert_eq!((shown[0].text.as_str(), shown[0].files.as_slice()), ("*the chart*", [uploaded.id.clone()].as_slice()));
    let methods: Vec<String> = slack.calls().into_iter().map(|call| call.method).filter(|m| m != "auth.test").collect();
    assert_eq!(methods, ["files.getUploadURLExternal", FakeSlack::UPLOAD_ROUTE, "files.completeUploadExternal"]);
    assert_eq!(slack.calls_to("files.getUploadURLExternal")[0].params["length"], PNG.len().to_string());
    assert_eq!(tokens_sent(&slack, FakeSlack::UPLOAD_ROUTE), [None], "the upload URL needs no token");

    // The share is an ordinary message: it can be edited and deleted.
    let reference = MessageRef { target: target("C1", Some("1700000000.000001")), message_id: sent.message_id };
    channel.edit(&reference, "the chart, again", TextFormat::Plain).await.unwrap();
    channel.delete(&reference).await.unwrap();
    assert!(slack.messages_in("C1").is_empty());
}

#[tokio::test]
async fn plain_text_comments_are_escaped_and_an_empty_text_sends_no_comment() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    let (mut plain, _a) = with_png(target("C1", None), "1 < 2", PNG);
    plain.format = TextFormat::Plain;
    channel.send(plain).await.unwrap();
    let (bare, _b) = with_png(target("C1", None), "", PNG);
    channel.send(bare).await.unwrap();
    let comments: Vec<Option<String>> = slack.uploaded_files().into_iter().map(|file| file.comment).collect();
    assert_eq!(comments, [Some("1 &lt; 2".to_owned()), None]);
}

#[tokio::test]
async fn a_rate_limited_upload_url_request_is_rate_limited_with_slacks_retry_after() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    slack.rate_limit_next("files.getUploadURLExternal", 1, 3);
    let (message, _file) = with_png(target("C1", None), "chart", PNG);
    let error = channel.send(message.clone()).await.unwrap_err();
    assert_eq!(error, ChannelError::RateLimited { retry_after: Some(Duration::from_secs(3)) });
    slack.rate_limit_next(FakeSlack::UPLOAD_ROUTE, 1, 4);
    let error = channel.send(message.clone()).await.unwrap_err();
    assert_eq!(error, ChannelError::RateLimited { retry_after: Some(Duration::from_secs(4)) });
    slack.fail_next_with_status(FakeSlack::UPLOAD_ROUTE, 502);
    assert!(matches!(channel.send(message.clone()).await, Err(ChannelError::Transient { .. })));
    assert!(slack.uploaded_files().is_empty());
    channel.send(message).await.unwrap();
    assert_eq!(slack.uploaded_files().len(), 1);
}

#[tokio::test]
async fn a_share_slack_reports_late_is_found_with_files_info() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    slack.defer_file_shares(1);
    let (message, _file) = with_png(target("C1", None), "chart", PNG);
    let sent = channel.send(message).await.unwrap();
    assert_eq!(Some(sent.message_id), slack.uploaded_files()[0].ts);
    assert_eq!(slack.calls_to("files.info").len(), 2);
}

#[tokio::test]
async fn without_a_reported_share_the_file_id_stands_for_the_message() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    slack.defer_file_shares(u32::MAX);
    let (message, _file) = with_png(target("C1", None), "chart", PNG);
    let sent = channel.send(message).await.unwrap();
    let file_id = slack.uploaded_files()[0].id.clone();
    assert_eq!(sent.message_id, file_id);
    let reference = MessageRef { target: target("C1", None), message_id: file_id };
    let error = channel.edit(&reference, "x", TextFormat::Plain).await.unwrap_err();
    assert!(matches!(error, ChannelError::Rejected { .. }), "{error:?}");
    channel.delete(&reference).await.unwrap();
    assert!(slack.uploaded_files().is_empty() && slack.messages_in("C1").is_empty(), "files.delete took both");
}

#[tokio::test]
async fn an_upload_whose_answer_was_lost_is_found_again_and_one_never_completed_is_not() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    let (message, _file) = with_png(target("C1", Some("1700000000.000001")), "chart", PNG);
    slack.apply_then_drop_next("files.completeUploadExternal");
    let error = channel.send(message.clone()).await.unwrap_err();
    assert!(matches!(error, ChannelError::Transient { .. }), "{error:?}");
    let found = channel.find_sent(&message).await.unwrap().expect("the share is found");
    assert_eq!(Some(found.message_id), slack.uploaded_files()[0].ts);

    let (mut other, _other_file) = with_png(target("C1", None), "chart", PNG);
    other.idempotency_key = Some("run-2:0".to_owned());
    slack.drop_next_before_apply("files.completeUploadExternal");
    assert!(channel.send(other.clone()).await.is_err());
    assert_eq!(channel.find_sent(&other).await.unwrap(), None, "never completed: safe to send again");
    let mut unknown = other.clone();
    unknown.idempotency_key = Some("run-3:0".to_owned());
    assert_eq!(channel.find_sent(&unknown).await.unwrap(), None);
}

/// Uploaded ahead of its send (the core records the file ids before it shares), a file is
/// shared by a restarted adapter without a second upload, and once shared it is found by its
/// id, by an adapter that remembers nothing of it.
#[tokio::test]
async fn a_file_uploaded_ahead_is_shared_and_found_by_its_id_after_a_restart() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    let (message, _file) = with_png(target("C1", None), "chart", PNG);
    let ahead = channel.upload_ahead(message).await.unwrap();
    let file_id = ahead.attachments[0].uploaded.clone().expect("the file's id");
    assert!(slack.calls_to("files.completeUploadExternal").is_empty(), "uploaded, not shared yet");

    let restarted = connected(&slack).await;
    assert_eq!(restarted.find_sent(&ahead).await.unwrap(), None, "not shared: safe to send");
    let sent = restarted.send(ahead.clone()).await.unwrap();
    assert_eq!(slack.calls_to("files.getUploadURLExternal").len(), 1, "not uploaded again");
    let [shared]: [_; 1] = slack.uploaded_files().try_into().unwrap();
    assert_eq!((shared.id.as_str(), shared.ts.as_deref()), (file_id.as_str(), Some(sent.message_id.as_str())));

    let again = connected(&slack).await;
    let found = again.find_sent(&ahead).await.unwrap().map(|found| found.message_id);
    assert_eq!(found, Some(sent.message_id));
}

/// A file uploaded ahead whose upload Slack forgot before the send (an upload left unshared
/// expires) is uploaded again and shared once; one completed by an attempt whose answer was
/// lost is not uploaded again.
#[tokio::test]
async fn a_file_uploaded_ahead_that_slack_forgot_is_uploaded_again_once() {
    let slack = FakeSlack::start().await.unwrap();
    let channel = connected(&slack).await;
    let (message, _file) = with_png(target("C1", None), "chart", PNG);
    let ahead = channel.upload_ahead(message).await.unwrap();
    let forgotten = ahead.attachments[0].uploaded.clone().expect("the file's id");
    slack.expire_pending_uploads();

    let restarted = connected(&slack).await;
    assert_eq!(restarted.find_sent(&ahead).await.unwrap(), None);
    let sent = restarted.send(ahead.clone()).await.unwrap();
    assert_eq!(slack.calls_to("files.getUploadURLExternal").len(), 2, "uploaded again");
    let [shared]: [_; 1] = slack.uploaded_files().try_into().unwrap();
    assert_ne!(shared.id, forgotten);
    assert_eq!((shared.bytes.as_slice(), shared.ts.as_deref()), (PNG, Some(sent.message_id.as_str())));

    // Shared already, by an attempt that never heard back: the repeat finds that share.
    let again = connected(&slack).await;
    let (message, _file) = with_png(target("C1", None), "chart", PNG);
    let ahead = again.upload_ahead(message).await.unwrap();
    slack.apply_then_drop_next("files.completeUploadExternal");
    assert!(again.send(ahead.clone()).await.is_err());
    let resent = again.send(ahead).await.unwrap();
    assert_eq!(slack.calls_to("files.getUploadURLExternal").len(), 3, "not uploaded a fourth time");
    assert_eq!(slack.uploaded_files().len(), 2, "one share each");
    assert_eq!(Some(resent.message_id), slack.uploaded_files()[1].ts);
}
