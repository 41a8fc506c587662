//! A Bot API method's parameters, from wherever the client put them.
//!
//! Telegram accepts parameters in the query string, as `application/x-www-form-urlencoded`, or
//! as a JSON body (teloxide sends JSON). Form and query values are strings; like Telegram, the
//! fake reads numbers and JSON-encoded objects (`reply_parameters`, `commands`) out of them when
//! a method asks for one.

use serde_json::{Map, Value};

/// Parameters of one call, as a JSON object.
#[derive(Debug, Default)]
pub(crate) struct Params(pub(crate) Map<String, Value>);

/// Decodes `a=1&b=x%20y` into a map of strings; `+` is a space.
fn parse_urlencoded(text: &str, into: &mut Map<String, Value>) {
    for pair in text.split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        into.insert(percent_decode(key), Value::String(percent_decode(value)));
    }
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = |byte: u8| (byte as char).to_digit(16);
                match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                    (Some(high), Some(low)) => {
                        out.push((high * 16 + low) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Params {
    /// Merges the query string and the body; body values win.
    pub(crate) fn parse(query: Option<&str>, content_type: Option<&str>, body: &[u8]) -> Result<Self, String> {
        let mut params = Map::new();
        if let Some(query) = query {
            parse_urlencoded(query, &mut params);
        }
        let trimmed = body.iter().filter(|byte| !byte.is_ascii_whitespace()).count();
        if trimmed == 0 {
            return Ok(Self(params));
        }
        let content_type = content_type.unwrap_or("").to_ascii_lowercase();
        if content_type.starts_with("application/x-www-form-urlencoded") {
            parse_urlencoded(&String::from_utf8_lossy(body), &mut params);
        } else if content_type.starts_with("multipart/") {
            return Err("the fake Telegram does not read multipart bodies (file uploads)".to_owned());
        } else {
            match serde_json::from_slice::<Value>(body) {
                Ok(Value::Object(object)) => params.extend(object),
                Ok(_) | Err(_) => return Err("Bad Request: can't parse JSON object".to_owned()),
            }
        }
        Ok(Self(params))
    }

    pub(crate) fn to_value(&self) -> Value {
        Value::Object(self.0.clone())
    }

    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(name).filter(|value| !value.is_null())
    }

    /// An integer given as a JSON number or as a decimal string.
    pub(crate) fn int(&self, name: &str) -> Option<i64> {
        match self.get(name)? {
            Value::Number(number) => number.as_i64(),
            Value::String(text) => text.trim().parse().ok(),
            _ => None,
        }
    }

    pub(crate) fn str(&self, name: &str) -> Option<&str> {
        self.get(name)?.as_str()
    }

    /// A JSON value given directly or as a JSON-encoded string (`reply_parameters={"message_id":3}`).
    pub(crate) fn json(&self, name: &str) -> Option<Value> {
        match self.get(name)? {
            Value::String(text) => serde_json::from_str(text).ok(),
            value => Some(value.clone()),
        }
    }

    /// A boolean given as JSON or as `true`/`false` text.
    pub(crate) fn bool(&self, name: &str) -> Option<bool> {
        match self.get(name)? {
            Value::Bool(flag) => Some(*flag),
            Value::String(text) => text.parse().ok(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn reads_query_form_and_json() {
        let params = Params::parse(Some("chat_id=5&text=a%20b+c"), None, b"").unwrap();
        assert_eq!(params.int("chat_id"), Some(5));
        assert_eq!(params.str("text"), Some("a b c"));

        let form = b"chat_id=-100&reply_parameters=%7B%22message_id%22%3A3%7D&x=%zz";
        let params = Params::parse(None, Some("application/x-www-form-urlencoded"), form).unwrap();
        assert_eq!(params.int("chat_id"), Some(-100));
        assert_eq!(params.json("reply_parameters"), Some(json!({ "message_id": 3 })));
        assert_eq!(params.str("x"), Some("%zz"));

        let params = Params::parse(Some("a=1"), Some("application/json"), br#"{"a":2,"b":null}"#).unwrap();
        assert_eq!(params.int("a"), Some(2));
        assert_eq!(params.int("b"), None);
        assert!(Params::parse(None, Some("application/json"), b"[1]").is_err());
    }
}
