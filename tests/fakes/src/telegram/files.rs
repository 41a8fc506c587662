//! Files on the fake Telegram, and the Bot API's two steps to fetch one: `getFile` turns a
//! `file_id` into a `file_path` (refusing files over [`DOWNLOAD_LIMIT`] with Telegram's
//! "file is too big"), then `GET {url}/file/bot{TOKEN}/{file_path}` serves the bytes with a
//! `Content-Length`.
//!
//! Files come from tests (a user's photo, document, voice note or sticker, see `media.rs`) and
//! from the bot's own uploads (`uploads.rs`), so a file the bot sent can be fetched back like
//! any other. Downloads are recorded as calls of the method [`FILE_METHOD`] (`params` holds
//! the `file_path`), so the one-shot faults and storms scripted for it apply to them: a 429,
//! a 5xx, a dropped connection.

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State as AxumState};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::faults::Fault;
use super::methods::{ApiError, MethodResult, dropped_response, error_response, malformed_response};
use super::params::Params;
use super::state::State;
use super::{Call, CallOutcome, Shared, lock};

/// The largest file a bot may download: "up to 20MB in size" (Bot API, `getFile`); the Bot
/// API server counts it as 20 MiB.
pub const DOWNLOAD_LIMIT: u64 = 20 << 20;

/// The largest photo `sendPhoto` takes: "The photo must be at most 10 MB in size" (Bot API).
pub const PHOTO_UPLOAD_LIMIT: u64 = 10 << 20;

/// The largest file any other `send<Media>` takes: "up to 50 MB" (Bot API, sending files).
pub const UPLOAD_LIMIT: u64 = 50 << 20;

/// The name downloads are recorded under in the call log, and the name to script their
/// faults with (`fail_next("file", …)`).
pub(crate) const FILE_METHOD: &str = "file";

/// Telegram's answer to `getFile` for a file over [`DOWNLOAD_LIMIT`].
const TOO_BIG: &str = "file is too big";

/// A file the fake holds, as a test refers to it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TgFile {
    /// What `getFile` and re-sends take.
    pub file_id: String,
    pub file_unique_id: String,
    /// Where `GET /file/bot{TOKEN}/{file_path}` finds it (`photos/file_3.jpg`).
    pub file_path: String,
    pub file_size: u64,
}

impl TgFile {
    /// The fields every Bot API file object starts with (`PhotoSize`, `Document`, `Voice`…).
    pub(crate) fn meta_json(&self) -> serde_json::Map<String, Value> {
        let mut meta = serde_json::Map::new();
        meta.insert("file_id".into(), self.file_id.clone().into());
        meta.insert("file_unique_id".into(), self.file_unique_id.clone().into());
        meta.insert("file_size".into(), self.file_size.into());
        meta
    }
}

/// One stored file: its identity and its bytes.
pub(crate) struct StoredFile {
    pub(crate) file: TgFile,
    pub(crate) bytes: Bytes,
}

/// Every file of one fake bot, by `file_id`.
#[derive(Default)]
pub(crate) struct Files {
    by_id: HashMap<String, StoredFile>,
    /// How many files were stored, for fresh ids and paths.
    count: u64,
}

impl Files {
    /// Stores `bytes` under a new `file_id`, at `{folder}/file_{n}.{extension}` as Telegram
    /// lays out its file paths (`photos/`, `documents/`, `voice/`, `stickers/` …).
    pub(crate) fn store(&mut self, folder: &str, extension: &str, bytes: Bytes) -> TgFile {
        self.count += 1;
        let n = self.count;
        let file = TgFile {
            // Real ids are long opaque strings; these say what they are, for readable failures.
            file_id: format!("fake-file-{n}-{folder}"),
            file_unique_id: format!("fake-unique-{n}"),
            file_path: format!("{folder}/file_{n}.{extension}"),
            file_size: bytes.len() as u64,
        };
        self.by_id.insert(file.file_id.clone(), StoredFile { file: file.clone(), bytes });
        file
    }

    pub(crate) fn get(&self, file_id: &str) -> Option<&StoredFile> {
        self.by_id.get(file_id)
    }

    fn by_path(&self, path: &str) -> Option<&StoredFile> {
        self.by_id.values().find(|stored| stored.file.file_path == path)
    }
}

/// `getFile`: the `File` object with its `file_path`, or Telegram's refusals.
pub(crate) fn get_file(state: &State, params: &Params) -> MethodResult {
    let Some(file_id) = params.str("file_id").filter(|id| !id.is_empty()) else {
        return Err(ApiError::bad_request("file_id not specified"));
    };
    let Some(stored) = state.files.get(file_id) else { return Err(ApiError::bad_request("invalid file_id")) };
    if stored.file.file_size > DOWNLOAD_LIMIT {
        return Err(ApiError::bad_request(TOO_BIG));
    }
    let mut file = stored.file.meta_json();
    file.insert("file_path".into(), stored.file.file_path.clone().into());
    Ok(Value::Object(file))
}

/// `GET /file/bot{TOKEN}/{file_path}`: the bytes, or 404 for a wrong token or an unknown path
/// (what Telegram answers for either).
pub(crate) async fn download(
    AxumState(shared): AxumState<Arc<Shared>>,
    Path((bot, path)): Path<(String, String)>,
) -> Response {
    let call = Call {
        method: FILE_METHOD.to_owned(),
        params: json!({ "file_path": path }),
        at: Instant::now(),
        outcome: CallOutcome::InFlight,
    };
    let index = shared.record(call);
    let (outcome, response) = serve(&shared, &bot, &path).await;
    shared.finish(index, outcome);
    response
}

async fn serve(shared: &Shared, bot: &str, path: &str) -> (CallOutcome, Response) {
    let not_found = ApiError::new(404, "Not Found");
    if bot.strip_prefix("bot") != Some(shared.token.as_str()) {
        return (CallOutcome::Answered(404), error_response(&not_found));
    }
    let fault = lock(&shared.state).faults.take(FILE_METHOD);
    match fault {
        Some(Fault::Drop | Fault::ApplyThenDrop) => return (CallOutcome::Dropped, dropped_response()),
        Some(Fault::Malformed) => return (CallOutcome::Malformed, malformed_response()),
        Some(Fault::Error { status, description, retry_after }) => {
            let error = ApiError { status, description, retry_after };
            shared.count_if_rate_limited(&error);
            return (CallOutcome::Answered(status), error_response(&error));
        }
        Some(Fault::Delay(delay)) => tokio::time::sleep(delay).await,
        None => {}
    }
    let bytes = lock(&shared.state).files.by_path(path).map(|stored| stored.bytes.clone());
    match bytes {
        None => (CallOutcome::Answered(404), error_response(&not_found)),
        Some(bytes) => {
            let response = (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/octet-stream")],
                // A body of known length: hyper sends `Content-Length`, as Telegram does.
                Body::from(bytes),
            )
                .into_response();
            (CallOutcome::Answered(200), response)
        }
    }
}
