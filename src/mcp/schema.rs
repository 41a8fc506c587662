//! An MCP tool's input schema as providers take it. Servers send any JSON Schema; the
//! providers want an object at the top: Anthropic refuses a schema without
//! `"type": "object"` or with `oneOf`/`anyOf`/`allOf` at the top, OpenAI one whose root is
//! not an object. Everything below the top passes through unchanged.

use serde_json::{Map, Value};

/// The schema to offer for a tool whose server sent `schema`.
pub fn sanitize(schema: &Map<String, Value>) -> Value {
    let mut top = schema.clone();
    top.remove("$schema");
    top.remove("$id");
    top.insert("type".into(), Value::String("object".into()));
    let mut properties = match top.remove("properties") {
        Some(Value::Object(properties)) => properties,
        _ => Map::new(),
    };
    let mut required: Vec<Value> = match top.remove("required") {
        Some(Value::Array(required)) => required,
        _ => Vec::new(),
    };
    // A choice between argument shapes at the top becomes one shape with every argument
    // the branches name; only what all of them require (`allOf`) stays required.
    for combinator in ["allOf", "anyOf", "oneOf"] {
        let Some(Value::Array(branches)) = top.remove(combinator) else { continue };
        for branch in branches.iter().filter_map(Value::as_object) {
            if let Some(Value::Object(more)) = branch.get("properties") {
                for (name, property) in more {
                    properties.entry(name.clone()).or_insert_with(|| property.clone());
                }
            }
            if combinator == "allOf"
                && let Some(Value::Array(more)) = branch.get("required")
            {
                required.extend(more.iter().filter(|name| !required.contains(name)).cloned().collect::<Vec<_>>());
            }
        }
    }
    top.remove("not");
    top.insert("properties".into(), Value::Object(properties));
    if !required.is_empty() {
        top.insert("required".into(), Value::Array(required));
    }
    Value::Object(top)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn an_ordinary_schema_passes_through() {
        let schema = json!({
            "type": "object",
            "properties": { "text": { "type": "string", "format": "uri" }, "n": { "$ref": "#/$defs/n" } },
            "required": ["text"],
            "$defs": { "n": { "type": "integer" } },
            "additionalProperties": false
        });
        assert_eq!(sanitize(&object(schema.clone())), schema);
    }

    #[test]
    fn the_top_becomes_an_object_providers_accept() {
        let sent = json!({ "$schema": "https://json-schema.org/draft/2020-12/schema" });
        assert_eq!(sanitize(&object(sent)), json!({ "type": "object", "properties": {} }));
        let choice = json!({
            "oneOf": [
                { "properties": { "id": { "type": "string" } }, "required": ["id"] },
                { "properties": { "name": { "type": "string" } }, "required": ["name"] }
            ],
            "allOf": [ { "properties": { "limit": { "type": "integer" } }, "required": ["limit"] } ]
        });
        let sanitized = sanitize(&object(choice));
        assert_eq!(sanitized["type"], "object");
        assert_eq!(sanitized["properties"].as_object().unwrap().len(), 3);
        assert_eq!(sanitized["required"], json!(["limit"]));
        assert!(sanitized.get("oneOf").is_none() && sanitized.get("allOf").is_none());
    }
}
