//! `current_time`: models do not know what time it is.

use async_trait::async_trait;
use chrono::{Local, Utc};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::{ToolContext, ToolError, ToolOutput, TypedTool};

/// No arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CurrentTimeArgs {}

pub struct CurrentTime;

#[async_trait]
impl TypedTool for CurrentTime {
    type Args = CurrentTimeArgs;
    const NAME: &'static str = "current_time";
    const DESCRIPTION: &'static str =
        "Get the current date and time, in UTC and in the gateway's local time zone, with the weekday.";

    async fn run(&self, _args: CurrentTimeArgs, _context: &ToolContext) -> Result<ToolOutput, ToolError> {
        let utc = Utc::now();
        let local = utc.with_timezone(&Local);
        Ok(json!({
            "utc": utc.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            "local": local.to_rfc3339_opts(chrono::SecondsFormat::Secs, false),
            "utc_offset": local.format("%:z").to_string(),
            "weekday": local.format("%A").to_string(),
            "unix": utc.timestamp(),
        })
        .to_string()
        .into())
    }
}
