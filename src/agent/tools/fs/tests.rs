use std::path::PathBuf;

use super::*;
use crate::agent::tools::tests::context;
use crate::channels::ChannelRegistry;

struct Files {
    root: tempfile::TempDir,
    read: ReadFile,
    write: WriteFile,
    edit: EditFile,
}

impl Files {
    fn workspace(&self) -> PathBuf {
        self.root.path().join("workspace")
    }
}

fn files() -> Files {
    let root = tempfile::tempdir().unwrap();
    let sandbox = Arc::new(Sandbox::unconfined(root.path()));
    Files {
        root,
        read: ReadFile::new(sandbox.clone()),
        write: WriteFile::new(sandbox.clone()),
        edit: EditFile::new(sandbox),
    }
}

async fn write(files: &Files, path: &str, content: &str) -> Result<String, ToolError> {
    let args = WriteArgs { path: path.into(), content: content.into() };
    files.write.run(args, &context(None, ChannelRegistry::default())).await.map(|output| output.text)
}

async fn read(files: &Files, path: &str, offset: Option<usize>, limit: Option<usize>) -> Result<String, ToolError> {
    files
        .read
        .run(ReadArgs { path: path.into(), offset, limit }, &context(None, ChannelRegistry::default()))
        .await
        .map(|output| output.text)
}

async fn edit(files: &Files, path: &str, old: &str, new: &str, all: bool) -> Result<String, ToolError> {
    let args = EditArgs { path: path.into(), old_text: old.into(), new_text: new.into(), replace_all: Some(all) };
    files.edit.run(args, &context(None, ChannelRegistry::default())).await.map(|output| output.text)
}

#[tokio::test]
async fn write_creates_directories_and_read_returns_lines() {
    let files = files();
    let text: String = (1..=10).map(|n| format!("line {n}\n")).collect();
    assert_eq!(write(&files, "src/deep/notes.txt", &text).await.unwrap(), "wrote 71 bytes to src/deep/notes.txt");
    assert_eq!(std::fs::read_to_string(files.workspace().join("src/deep/notes.txt")).unwrap(), text);
    assert_eq!(read(&files, "src/deep/notes.txt", None, None).await.unwrap(), text.trim_end());
    let part = read(&files, "src/deep/notes.txt", Some(3), Some(2)).await.unwrap();
    assert_eq!(part, "line 3\nline 4\n\n[lines 3-4 of 10; use offset and limit for the rest]");
    // An absolute path inside the workspace is the same file.
    let absolute = files.workspace().join("src/deep/notes.txt");
    assert!(read(&files, absolute.to_str().unwrap(), Some(10), None).await.unwrap().starts_with("line 10"));
    assert!(read(&files, "missing.txt", None, None).await.unwrap_err().0.contains("does not exist"));
}

#[tokio::test]
async fn edit_replaces_one_match_and_names_the_count_otherwise() {
    let files = files();
    write(&files, "a.rs", "let x = 1;\nlet y = 1;\n").await.unwrap();
    let none = edit(&files, "a.rs", "let z", "let w", false).await.unwrap_err();
    assert!(none.0.contains("0 matches"), "{none}");
    let two = edit(&files, "a.rs", "= 1;", "= 2;", false).await.unwrap_err();
    assert!(two.0.contains("matches 2 times"), "{two}");
    assert_eq!(std::fs::read_to_string(files.workspace().join("a.rs")).unwrap(), "let x = 1;\nlet y = 1;\n");
    edit(&files, "a.rs", "let x = 1;", "let x = 5;", false).await.unwrap();
    assert_eq!(edit(&files, "a.rs", "1;", "3;", true).await.unwrap(), "replaced 1 occurrence(s) in a.rs");
    assert_eq!(std::fs::read_to_string(files.workspace().join("a.rs")).unwrap(), "let x = 5;\nlet y = 3;\n");
}

#[tokio::test]
async fn paths_that_leave_the_workspace_are_refused() {
    let files = files();
    write(&files, "inside.txt", "ok").await.unwrap();
    let secret = files.root.path().join("secret.txt");
    std::fs::write(&secret, "top secret").unwrap();
    std::os::unix::fs::symlink(&secret, files.workspace().join("link.txt")).unwrap();
    std::os::unix::fs::symlink(files.root.path(), files.workspace().join("up")).unwrap();
    for path in ["../secret.txt", "sub/../../secret.txt", "link.txt", "up/secret.txt", "/etc/passwd"] {
        let refused = read(&files, path, None, None).await.unwrap_err();
        assert!(refused.0.contains("outside the workspace"), "{path}: {refused}");
    }
    let absolute = secret.to_str().unwrap();
    for path in ["../escaped.txt", "up/escaped.txt", absolute, "up/new/dir/file.txt"] {
        let refused = write(&files, path, "x").await.unwrap_err();
        assert!(refused.0.contains("outside the workspace"), "{path}: {refused}");
    }
    assert!(edit(&files, "link.txt", "top", "no", false).await.unwrap_err().0.contains("outside the workspace"));
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), "top secret");
    assert!(!files.root.path().join("escaped.txt").exists() && !files.root.path().join("new").exists());
}

#[tokio::test]
async fn binary_and_oversized_files_are_refused_with_a_reason() {
    let files = files();
    std::fs::create_dir_all(files.workspace()).unwrap();
    std::fs::write(files.workspace().join("blob.bin"), [0u8, 1, 2, 3]).unwrap();
    assert!(read(&files, "blob.bin", None, None).await.unwrap_err().0.contains("binary file"));
    let big = std::fs::File::create(files.workspace().join("big.txt")).unwrap();
    big.set_len(MAX_FILE_BYTES + 1).unwrap();
    assert!(read(&files, "big.txt", None, None).await.unwrap_err().0.contains("use exec"));
}

/// A build without `media` still knows an image when it reads one, and says which build can
/// show it rather than handing the model a screenful of binary.
#[cfg(not(feature = "media"))]
#[tokio::test]
async fn an_image_file_read_without_the_media_feature_names_the_feature() {
    let files = files();
    std::fs::create_dir_all(files.workspace()).unwrap();
    let picture = image::RgbImage::from_fn(30, 10, |x, _| image::Rgb([(x % 256) as u8, 0, 0]));
    picture.save(files.workspace().join("small.png")).unwrap();
    let args = ReadArgs { path: "small.png".into(), offset: None, limit: None };
    let error = files.read.run(args, &context(None, ChannelRegistry::default())).await.unwrap_err();
    assert!(error.to_string().contains("`small.png`: images are not read here"), "{error}");
    assert!(error.to_string().contains("--features media"), "{error}");
}

#[cfg(feature = "media")]
#[tokio::test]
async fn an_image_file_is_read_as_an_image_for_the_model() {
    let files = files();
    std::fs::create_dir_all(files.workspace().join("shots")).unwrap();
    let picture = image::RgbImage::from_fn(3000, 1000, |x, _| image::Rgb([(x % 256) as u8, 0, 0]));
    picture.save(files.workspace().join("shots/wide.png")).unwrap();
    let args = ReadArgs { path: "shots/wide.png".into(), offset: None, limit: None };
    let output = files.read.run(args, &context(None, ChannelRegistry::default())).await.unwrap();
    assert_eq!(output.images.len(), 1);
    assert_eq!((output.images[0].width, output.images[0].height), (1568, 523));
    assert!(output.text.starts_with("shots/wide.png ("), "{}", output.text);
    assert!(!output.text.contains(&output.images[0].data[..20]), "the text holds no image bytes");
}
