//! Discord's markdown: Discord renders almost everything the model writes, so the reply goes
//! out as written — except tables, which Discord shows as raw pipes. Each table is replaced,
//! in place, by a code block with aligned columns; every other byte is the model's.

use pulldown_cmark::{Event, Tag, TagEnd};

use super::table::TableBuilder;

/// Renders markdown for Discord: the input with its tables turned into code blocks.
pub fn render(markdown: &str) -> String {
    let mut out = String::with_capacity(markdown.len());
    let mut copied = 0;
    let mut table: Option<(usize, TableBuilder)> = None;
    for (event, range) in super::parser(markdown).into_offset_iter() {
        match (&mut table, event) {
            (None, Event::Start(Tag::Table(alignments))) => table = Some((range.start, TableBuilder::new(alignments))),
            (Some((start, builder)), Event::End(TagEnd::Table)) => {
                let end = *start + markdown[*start..range.end].trim_end().len();
                out.push_str(&markdown[copied..*start]);
                push_code_block(&builder.layout(), continuation(&markdown[..*start]), &mut out);
                copied = end;
                table = None;
            }
            (Some((_, builder)), event) => builder.event(&event),
            (None, _) => {}
        }
    }
    out.push_str(&markdown[copied..]);
    out
}

/// What must start each following line for the block to stay inside the container the table
/// sits in: `> ` markers are kept, a list marker becomes the spaces that indent its content.
fn continuation(before: &str) -> String {
    let line = before.rsplit('\n').next().unwrap_or_default();
    line.chars().map(|ch| if ch == '>' { '>' } else { ' ' }).collect()
}

fn push_code_block(table: &str, continuation: String, out: &mut String) {
    out.push_str("```");
    for line in table.split('\n') {
        out.push('\n');
        out.push_str(&continuation);
        out.push_str(line);
    }
    out.push('\n');
    out.push_str(&continuation);
    out.push_str("```");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_without_tables_is_left_alone() {
        let text = "# Hi\n\n**bold** _it_ ~~s~~ `c` [l](https://x) <b>raw</b> & <@123>\n\n```rust\nfn main() {}\n```\n";
        assert_eq!(render(text), text);
    }

    #[test]
    fn a_table_becomes_an_aligned_code_block() {
        let text = "Results:\n\n| Name | Score |\n|------|------:|\n| **Ann** | 9 |\n| Bob | 10 |\n\nDone.";
        assert_eq!(
            render(text),
            "Results:\n\n```\nName | Score\n-----|------\nAnn  |     9\nBob  |    10\n```\n\nDone."
        );
    }

    #[test]
    fn a_table_in_a_quote_stays_in_the_quote() {
        let text = "> | a | b |\n> |---|---|\n> | 1 | 2 |\n\nafter";
        assert_eq!(render(text), "> ```\n> a | b\n> --|--\n> 1 | 2\n> ```\n\nafter");
    }
}
