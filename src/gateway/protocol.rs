//! The gateway's frames (SPEC §8, `docs/gateway-protocol.md`): requests in, responses and
//! events out, each one JSON text message.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version `hello-ok` announces.
pub const PROTOCOL_VERSION: u32 = 1;

/// Methods a client may call after `connect`.
pub const METHODS: [&str; 7] =
    ["agent", "agent.wait", "chat.send", "chat.abort", "chat.history", "sessions.list", "health"];

/// Events a client may receive.
pub const EVENTS: [&str; 4] = ["agent", "chat", "approval", "tick"];

/// A client's request: `{type:"req", id, method, params}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    #[serde(rename = "type")]
    pub kind: String,
    pub id: Value,
    pub method: String,
    #[serde(default)]
    pub params: Value,
}

/// Why a request failed, as the client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ErrorCode {
    InvalidRequest,
    Unauthorized,
    NotFound,
    Unavailable,
}

/// The `error` of a failed response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RpcError {
    pub code: ErrorCode,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl RpcError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), retryable: None, retry_after_ms: None }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// The gateway cannot do it right now; trying again later may work.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self { retryable: Some(true), ..Self::new(ErrorCode::Unavailable, message) }
    }
}

/// A frame the gateway sends.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum Outgoing {
    Res {
        id: Value,
        ok: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        payload: Option<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<RpcError>,
    },
    Event {
        event: &'static str,
        payload: Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
    },
}

impl Outgoing {
    pub fn response(id: Value, result: Result<Value, RpcError>) -> Self {
        match result {
            Ok(payload) => Outgoing::Res { id, ok: true, payload: Some(payload), error: None },
            Err(error) => Outgoing::Res { id, ok: false, payload: None, error: Some(error) },
        }
    }

    /// The frame as JSON text. Serializing these types cannot fail; should it ever, the
    /// client gets an error response rather than nothing.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|error| {
            format!(
                r#"{{"type":"res","id":null,"ok":false,"error":{{"code":"UNAVAILABLE","message":"cannot encode a frame: {}"}}}}"#,
                error.to_string().replace('"', "'")
            )
        })
    }
}

/// Reads a request frame; the error explains what is wrong, with the id when one was read.
pub fn parse_request(text: &str) -> Result<Request, (Value, RpcError)> {
    let value: Value = serde_json::from_str(text)
        .map_err(|error| (Value::Null, RpcError::invalid(format!("the frame is not JSON: {error}"))))?;
    let id = value.get("id").cloned().unwrap_or(Value::Null);
    let request: Request = serde_json::from_value(value)
        .map_err(|error| (id.clone(), RpcError::invalid(format!("not a request frame: {error}"))))?;
    if request.kind != "req" {
        return Err((id, RpcError::invalid(format!("expected a frame of type \"req\", got {:?}", request.kind))));
    }
    if !(request.id.is_string() || request.id.is_number()) {
        return Err((Value::Null, RpcError::invalid("a request id must be a string or a number")));
    }
    Ok(request)
}

/// Decodes a method's params into `T`, naming the offending field when they do not fit.
pub fn params<T: serde::de::DeserializeOwned>(params: &Value) -> Result<T, RpcError> {
    let params = if params.is_null() { Value::Object(Default::default()) } else { params.clone() };
    serde_path_to_error::deserialize(params).map_err(|error| {
        let path = error.path().to_string();
        let inner = error.into_inner();
        if path == "." {
            RpcError::invalid(format!("params: {inner}"))
        } else {
            RpcError::invalid(format!("params.{path}: {inner}"))
        }
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn requests_are_read_and_bad_frames_explained() {
        let request = parse_request(r#"{"type":"req","id":"1","method":"health","params":{}}"#).unwrap();
        assert_eq!((request.method.as_str(), request.id), ("health", json!("1")));
        let (id, error) = parse_request("{not json").unwrap_err();
        assert_eq!((id, error.code), (Value::Null, ErrorCode::InvalidRequest));
        let (id, error) = parse_request(r#"{"type":"res","id":7,"method":"x"}"#).unwrap_err();
        assert_eq!(id, json!(7));
        assert!(error.message.contains("\"res\""), "{}", error.message);
    }

    /// Found by fuzzing (fuzz/seeds/gateway_frame/regression-large-numeric-id): a numeric id
    /// past 64 bits was read one ulp off, so the response's id was not the request's.
    #[test]
    fn a_large_numeric_id_is_echoed_as_the_client_sent_it() {
        let id = "666666666666666666666666666666666666666666666666666666666662";
        let request = parse_request(&format!(r#"{{"type":"req","id":{id},"method":"health"}}"#)).unwrap();
        let answer = Outgoing::response(request.id, Ok(json!({}))).to_text();
        // The nearest f64 to the id, as any correctly rounding JSON reader (a browser's) has it.
        assert!(answer.contains(r#""id":6.666666666666667e+59"#), "{answer}");
    }

    #[test]
    fn frames_serialize_as_the_protocol_says() {
        let ok = Outgoing::response(json!("a"), Ok(json!({"x": 1})));
        assert_eq!(ok.to_text(), r#"{"type":"res","id":"a","ok":true,"payload":{"x":1}}"#);
        let failed = Outgoing::response(json!(2), Err(RpcError::unavailable("busy")));
        assert_eq!(
            failed.to_text(),
            r#"{"type":"res","id":2,"ok":false,"error":{"code":"UNAVAILABLE","message":"busy","retryable":true}}"#
        );
        let event = Outgoing::Event { event: "tick", payload: json!({"ts": 1}), seq: None };
        assert_eq!(event.to_text(), r#"{"type":"event","event":"tick","payload":{"ts":1}}"#);
    }

    #[test]
    fn params_errors_name_the_field() {
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        struct P {
            #[allow(dead_code)]
            message: String,
        }
        let error = params::<P>(&json!({"message": 3})).unwrap_err();
        assert!(error.message.starts_with("params.message"), "{}", error.message);
        let error = params::<P>(&json!({"message": "hi", "extra": 1})).unwrap_err();
        assert!(error.message.contains("extra"), "{}", error.message);
    }
}
