//! PDFs for the media tests, written byte for byte: a normal one with text, and hostile ones
//! that make the extractor (pdf-extract 0.12 on lopdf 0.42) run without end or eat memory
//! without bound, each with how it does so. [`pdf_with_trailer`] and [`stream`] are the
//! builder underneath, shared with the extractor's unit tests in `src/media/pdf/tests.rs`.

/// A PDF of `objects` (numbered from 1; object 1 is the catalog) with a correct cross
/// reference table and `trailer_extra` added to the trailer dictionary (`/Encrypt 6 0 R`, say).
/// The one writer of PDF bytes for every test, so a file the parser gets is never one the
/// parser's own library built.
pub fn pdf_with_trailer(objects: &[&[u8]], trailer_extra: &str) -> Vec<u8> {
    let mut bytes = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::new();
    for (index, object) in objects.iter().enumerate() {
        offsets.push(bytes.len());
        bytes.extend_from_slice(format!("{} 0 obj\n", index + 1).as_bytes());
        bytes.extend_from_slice(object);
        bytes.extend_from_slice(b"\nendobj\n");
    }
    let xref = bytes.len();
    bytes.extend_from_slice(format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes());
    for offset in offsets {
        bytes.extend_from_slice(format!("{offset:010} 00000 n \n").as_bytes());
    }
    let size = objects.len() + 1;
    let extra = if trailer_extra.is_empty() { String::new() } else { format!(" {trailer_extra}") };
    bytes.extend_from_slice(
        format!("trailer\n<< /Size {size} /Root 1 0 R{extra} >>\nstartxref\n{xref}\n%%EOF\n").as_bytes(),
    );
    bytes
}

/// [`pdf_with_trailer`] with nothing added to the trailer.
pub fn pdf(objects: &[&[u8]]) -> Vec<u8> {
    pdf_with_trailer(objects, "")
}

/// A stream object: `dict`'s entries plus its `/Length`, then `content`.
pub fn stream(dict: &str, content: &str) -> Vec<u8> {
    format!("<< {dict} /Length {} >>\nstream\n{content}\nendstream", content.len()).into_bytes()
}

/// Catalog, pages, and one page (objects 1–3) whose resources are `resources` and whose
/// content is object 4; `more` are objects 5, 6, ….
fn one_page(resources: &str, content: &str, more: Vec<Vec<u8>>) -> Vec<u8> {
    let mut objects = vec![
        b"<< /Type /Catalog /Pages 2 0 R >>".to_vec(),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_vec(),
        format!("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << {resources} >> /Contents 4 0 R >>")
            .into_bytes(),
        stream("", content),
    ];
    objects.extend(more);
    pdf(&objects.iter().map(Vec::as_slice).collect::<Vec<_>>())
}

/// A one-page PDF in Helvetica with `lines` of text.
pub fn text_pdf(lines: &[&str]) -> Vec<u8> {
    let mut content = String::from("BT /F1 12 Tf 72 720 Td 14 TL\n");
    for line in lines {
        content.push_str(&format!("({line}) Tj T*\n"));
    }
    content.push_str("ET");
    let helvetica = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_vec();
    one_page("/Font << /F1 5 0 R >>", &content, vec![helvetica])
}

/// How many forms deep [`endless_pdf`] goes: within Ferry's limit on form nesting (32), so
/// the file passes every check made before the parser runs.
pub const ENDLESS_DEPTH: usize = 30;
/// How often each form of [`endless_pdf`] draws the next.
pub const ENDLESS_FAN_OUT: usize = 8;

/// A PDF the extractor never finishes in practice, in constant memory: a chain of
/// [`ENDLESS_DEPTH`] forms where each draws the next [`ENDLESS_FAN_OUT`] times. No form draws
/// itself and none nests too deeply, but pdf-extract follows every `Do` by recursion
/// without remembering what it has drawn, so the last form runs 8^29 times (about 10^26).
pub fn endless_pdf() -> Vec<u8> {
    let calls = ["/N Do"; ENDLESS_FAN_OUT].join(" ");
    let forms = (0..ENDLESS_DEPTH)
        .map(|level| {
            let id = 5 + level;
            let (resources, content) = if level + 1 < ENDLESS_DEPTH {
                (format!("/Resources << /XObject << /N {} 0 R >> >>", id + 1), calls.as_str())
            } else {
                (String::new(), "1 w")
            };
            stream(&format!("/Type /XObject /Subtype /Form /BBox [0 0 10 10] {resources}"), content)
        })
        .collect();
    one_page("/XObject << /N 5 0 R >>", "/N Do", forms)
}

/// A PDF whose font's ToUnicode CMap maps every 32-bit code (`beginbfrange` from
/// `<00000000>` to `<FFFFFFFF>`): adobe-cmap-parser fills a map entry by entry, four billion
/// of them, so reading the page's text allocates without bound (hundreds of gigabytes).
pub fn cmap_bomb_pdf() -> Vec<u8> {
    let cmap = "/CIDInit /ProcSet findresource begin 12 dict begin begincmap \
                1 begincodespacerange <00000000> <FFFFFFFF> endcodespacerange \
                1 beginbfrange <00000000> <FFFFFFFF> <00000000> endbfrange \
                endcmap CMapName currentdict /CMap defineresource pop end end";
    let font = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /ToUnicode 6 0 R >>".to_vec();
    one_page("/Font << /F1 5 0 R >>", "BT /F1 12 Tf 72 720 Td (boom) Tj ET", vec![font, stream("", cmap)])
}
