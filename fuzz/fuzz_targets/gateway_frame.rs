//! A WebSocket RPC frame from a gateway client (`src/gateway/protocol.rs`: `parse_request`,
//! which `connection.rs` calls on every text frame, and `params`, which decodes a method's
//! params).
//!
//! Asserts: never panics; a request read is a `req` with a string or number id; the answer
//! to any frame — the error for a bad one, or a response echoing the request's params — is
//! one JSON object that reads back with the same id and payload.
#![no_main]

use ferry::gateway::protocol::{Outgoing, params, parse_request};
use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};

/// The frame `outgoing` is sent as, read back.
fn read_back(outgoing: &Outgoing) -> Value {
    let text = outgoing.to_text();
    let frame: Value = serde_json::from_str(&text).unwrap_or_else(|error| panic!("{text:?} is not JSON: {error}"));
    assert_eq!(frame["type"], "res", "{text}");
    frame
}

fuzz_target!(|frame: &[u8]| {
    let Ok(frame) = std::str::from_utf8(frame) else { return };
    match parse_request(frame) {
        Ok(request) => {
            assert_eq!(request.kind, "req");
            assert!(request.id.is_string() || request.id.is_number(), "{request:?}");
            let _ = params::<Map<String, Value>>(&request.params);
            let echoed = read_back(&Outgoing::response(request.id.clone(), Ok(request.params.clone())));
            assert_eq!(echoed["id"], request.id);
            assert_eq!(echoed["ok"], true);
            assert_eq!(echoed["payload"], request.params);
        }
        Err((id, error)) => {
            let answer = read_back(&Outgoing::response(id.clone(), Err(error)));
            assert_eq!(answer["id"], id);
            assert_eq!(answer["ok"], false);
            assert!(answer["error"]["message"].is_string(), "{answer}");
        }
    }
});
