//! How a model's reasoning reads in a chat (`/reasoning on|stream`): marked as reasoning,
//! quoted, so it is never mistaken for the answer.

/// The mark reasoning starts with.
pub const REASONING_MARK: &str = "💭 Reasoning";

/// `reasoning` as a message (Markdown: a heading line, then the text as a quote). The
/// reply pipeline renders and splits it within the platform's limits like any reply.
pub fn reasoning_message(reasoning: &str) -> String {
    let quoted: Vec<String> = reasoning
        .trim()
        .lines()
        .map(|line| if line.trim().is_empty() { ">".to_owned() } else { format!("> {line}") })
        .collect();
    format!("{REASONING_MARK}\n{}", quoted.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_is_quoted_under_the_mark() {
        assert_eq!(reasoning_message("\nFirst.\n\nSecond.\n"), "💭 Reasoning\n> First.\n>\n> Second.");
    }
}
