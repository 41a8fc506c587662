//! PDFs written by hand, byte for byte (with `ferry_fakes::pdfs`, the one PDF writer of the
//! tests), so the tests do not trust the parser to build what it then reads.

use ferry_fakes::pdfs::{pdf, pdf_with_trailer, stream};

use super::parse::tidy;
use super::*;

const CATALOG: &[u8] = b"<< /Type /Catalog /Pages 2 0 R >>";
const PAGES: &[u8] = b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>";
const HELVETICA: &[u8] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>";

/// One page in Helvetica (object 4) whose content stream (object 5) is `content`; the page's
/// resources also list `xobjects` (e.g. `/X0 6 0 R`); `more` are objects 6, 7, ….
fn one_page(content: &str, xobjects: &str, more: &[&[u8]]) -> Vec<u8> {
    let page = format!(
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] \
         /Resources << /Font << /F1 4 0 R >> /XObject << {xobjects} >> >> /Contents 5 0 R >>"
    );
    let content = stream("", content);
    let mut objects: Vec<&[u8]> = vec![CATALOG, PAGES, page.as_bytes(), HELVETICA, &content];
    objects.extend_from_slice(more);
    pdf(&objects)
}

/// A one-page PDF with `lines` of text.
fn text_pdf(lines: &[&str]) -> Vec<u8> {
    let mut content = String::from("BT /F1 12 Tf 72 720 Td 14 TL\n");
    for line in lines {
        content.push_str(&format!("({line}) Tj T*\n"));
    }
    content.push_str("ET");
    one_page(&content, "", &[])
}

#[test]
fn the_text_of_a_pdf_comes_out_line_by_line() {
    let text = pdf_text(&text_pdf(&["Quarterly report", "Revenue grew by 12 percent."])).unwrap();
    assert_eq!(text, "Quarterly report\nRevenue grew by 12 percent.");
}

#[test]
fn text_inside_a_form_xobject_is_read() {
    let form =
        stream("/Type /XObject /Subtype /Form /BBox [0 0 612 792]", "BT /F1 12 Tf 72 700 Td (Signed form) Tj ET");
    let text = pdf_text(&one_page("/X0 Do", "/X0 6 0 R", &[&form])).unwrap();
    assert_eq!(text, "Signed form");
}

/// A 2×2 RGB image XObject (object 6), raw samples.
fn image() -> Vec<u8> {
    let samples = [0xffu8, 0, 0, 0, 0xff, 0, 0, 0, 0xff, 0x2f, 0x44, 0x6f];
    let mut object =
        b"<< /Type /XObject /Subtype /Image /Width 2 /Height 2 /ColorSpace /DeviceRGB /BitsPerComponent 8 /Length 12 >>\nstream\n"
            .to_vec();
    object.extend_from_slice(&samples);
    object.extend_from_slice(b"\nendstream");
    object
}

#[test]
fn text_beside_an_image_is_read() {
    let content = "q 100 0 0 100 72 600 cm /Im0 Do Q BT /F1 12 Tf 72 720 Td (Figure 1) Tj ET";
    assert_eq!(pdf_text(&one_page(content, "/Im0 6 0 R", &[&image()])).unwrap(), "Figure 1");
}

#[test]
fn a_scan_is_no_text() {
    // A page that only draws an image, as a scanner makes it.
    let scan = one_page("q 612 0 0 792 0 0 cm /Im0 Do Q", "/Im0 6 0 R", &[&image()]);
    assert_eq!(pdf_text(&scan), Err(PdfError::NoText));
}

#[test]
fn a_scanned_jpeg_page_is_no_text() {
    let mut jpeg = std::io::Cursor::new(Vec::new());
    ::image::RgbImage::from_fn(64, 64, |x, y| ::image::Rgb([x as u8 * 4, y as u8 * 4, 128]))
        .write_to(&mut jpeg, ::image::ImageFormat::Jpeg)
        .unwrap();
    let jpeg = jpeg.into_inner();
    let mut object = format!(
        "<< /Type /XObject /Subtype /Image /Width 64 /Height 64 /ColorSpace /DeviceRGB /BitsPerComponent 8 \
         /Filter /DCTDecode /Length {} >>\nstream\n",
        jpeg.len()
    )
    .into_bytes();
    object.extend_from_slice(&jpeg);
    object.extend_from_slice(b"\nendstream");
    let scan = one_page("q 612 0 0 792 0 0 cm /Im0 Do Q", "/Im0 6 0 R", &[&object]);
    assert_eq!(pdf_text(&scan), Err(PdfError::NoText));
}

#[test]
fn a_page_without_text_is_no_text() {
    // What a scan looks like to a text extractor: drawing, no text objects.
    let scan = one_page("0 0 1 rg 72 72 468 648 re f", "", &[]);
    assert_eq!(pdf_text(&scan), Err(PdfError::NoText));
}

#[test]
fn a_password_protected_pdf_is_encrypted() {
    // A standard security handler whose /U does not match the empty password, so only the
    // right user password would open it.
    let encrypt = format!("<< /Filter /Standard /V 1 /R 2 /Length 40 /P -4 /O <{0}> /U <{0}> >>", "ab".repeat(32));
    let content = stream("", "BT /F1 12 Tf 72 720 Td (secret) Tj ET");
    let page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 4 0 R >> >> \
                 /Contents 5 0 R >>";
    let bytes = pdf_with_trailer(
        &[CATALOG, PAGES, page, HELVETICA, &content, encrypt.as_bytes()],
        "/Encrypt 6 0 R /ID [<00112233445566778899aabbccddeeff> <00112233445566778899aabbccddeeff>]",
    );
    assert_eq!(pdf_text(&bytes), Err(PdfError::Encrypted));
}

#[test]
fn garbage_and_truncated_files_are_unreadable_errors() {
    for bytes in [&b""[..], b"not a pdf at all", b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog"] {
        assert!(matches!(pdf_text(bytes), Err(PdfError::Unreadable(_))), "{:?}", String::from_utf8_lossy(bytes));
    }
    let whole = text_pdf(&["cut short"]);
    for cut in [whole.len() / 4, whole.len() / 2, whole.len() - 20] {
        // Whatever the parser makes of a cut file, it answers and does not panic.
        let _ = pdf_text(&whole[..cut]);
    }
}

#[test]
fn a_panic_inside_the_parser_becomes_unreadable() {
    // `Do` without an operand: the parser indexes operands[0] and panics.
    let result = pdf_text(&one_page("BT /F1 12 Tf (before) Tj ET Do", "", &[]));
    match result {
        Err(PdfError::Unreadable(reason)) => assert!(reason.starts_with("the parser panicked"), "{reason}"),
        other => panic!("expected the panic to be caught, got {other:?}"),
    }
}

#[test]
fn a_form_that_draws_itself_is_refused_before_it_can_overflow_the_stack() {
    // No /Resources of its own, so it runs in the page's, which name it: `/X0 Do` inside X0
    // would recurse until the process aborts.
    let form = stream("/Type /XObject /Subtype /Form /BBox [0 0 10 10]", "/X0 Do");
    let result = pdf_text(&one_page("/X0 Do", "/X0 6 0 R", &[&form]));
    assert_eq!(result, Err(PdfError::Unreadable("a form draws itself".into())));

    // The same through its own resources, two forms calling each other.
    let first =
        stream("/Type /XObject /Subtype /Form /BBox [0 0 10 10] /Resources << /XObject << /B 7 0 R >> >>", "/B Do");
    let second =
        stream("/Type /XObject /Subtype /Form /BBox [0 0 10 10] /Resources << /XObject << /A 6 0 R >> >>", "/A Do");
    let result = pdf_text(&one_page("/A Do", "/A 6 0 R", &[&first, &second]));
    assert_eq!(result, Err(PdfError::Unreadable("a form draws itself".into())));
}

#[test]
fn forms_nested_deeper_than_the_limit_are_refused() {
    let chain = |length: usize| {
        let forms: Vec<Vec<u8>> = (0..length)
            .map(|level| {
                let id = 6 + level;
                let resources = if level + 1 < length {
                    format!("/Resources << /XObject << /N {} 0 R >> >>", id + 1)
                } else {
                    "/Resources << /Font << /F1 4 0 R >> >>".to_owned()
                };
                let content = if level + 1 < length { "/N Do" } else { "BT /F1 12 Tf 72 700 Td (deep) Tj ET" };
                stream(&format!("/Type /XObject /Subtype /Form /BBox [0 0 612 792] {resources}"), content)
            })
            .collect();
        let forms: Vec<&[u8]> = forms.iter().map(Vec::as_slice).collect();
        one_page("/N Do", "/N 6 0 R", &forms)
    };
    assert_eq!(pdf_text(&chain(MAX_FORM_DEPTH)).unwrap(), "deep");
    let refused = pdf_text(&chain(MAX_FORM_DEPTH + 1));
    assert!(matches!(&refused, Err(PdfError::Unreadable(reason)) if reason.contains("nest")), "{refused:?}");
}

#[test]
fn tidy_trims_lines_and_squeezes_blank_runs() {
    assert_eq!(tidy("\n\n  a  \n\n\n\nb\nc   \n\n"), "  a\n\nb\nc");
    assert_eq!(tidy(" \n\t\n"), "");
}
