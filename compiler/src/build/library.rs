//! The files a build writes besides the generated sources: the static
//! library (kernel and weight objects, and the C API compiled by the
//! target's C compiler), and writes that leave unchanged files alone.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{hash_kiln_binary, Artifacts};

/// Write only when the contents differ, so mtimes stay put for unchanged files.
pub(super) fn write_if_changed(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    if same_contents(path, bytes) {
        return Ok(());
    }
    std::fs::write(path, bytes)
}

/// Whether the file `path` holds exactly `bytes`: the size first, then the
/// contents a chunk at a time, stopping at the first difference (a new
/// weights' object differs in its first chunk; reading all 75 MB of the old
/// one took as long as writing the new).
fn same_contents(path: &Path, bytes: &[u8]) -> bool {
    use std::io::Read;
    let Ok(mut file) = std::fs::File::open(path) else { return false };
    if file.metadata().map(|m| m.len()).ok() != Some(bytes.len() as u64) {
        return false;
    }
    let mut chunk = vec![0u8; 1 << 20];
    let mut rest = bytes;
    while !rest.is_empty() {
        let n = chunk.len().min(rest.len());
        if file.read_exact(&mut chunk[..n]).is_err() || chunk[..n] != rest[..n] {
            return false;
        }
        rest = &rest[n..];
    }
    // Nothing past the end (the file grew since its size was read).
    file.read(&mut chunk[..1]).is_ok_and(|n| n == 0)
}

/// The file of object `k` of model `name`: `<name>.o`, then `<name>.1.o`, ….
pub(super) fn object_file(name: &str, k: usize) -> String {
    if k == 0 {
        format!("{name}.o")
    } else {
        format!("{name}.{k}.o")
    }
}

/// Build `lib<lib_name>.a` from the objects or C source, and the C API, with
/// the `cc` crate: in a build script for cargo's target with the compiler
/// cargo and `cc` pick; elsewhere for the triple the model was compiled for.
pub(super) fn archive(a: &Artifacts, dir: &Path, lib_name: &str, target: &str) -> Result<(), String> {
    let b = c_compiler(dir, target);
    let mut sources = Vec::new();
    if a.c_source.is_some() {
        sources.push(format!("{}.c", a.name));
    }
    if !a.c_api.is_empty() {
        sources.push(format!("{}_api.c", a.name));
    }
    let triple = c_triple(target);
    let mut objects: Vec<PathBuf> = (0..a.objects.len()).map(|k| dir.join(object_file(&a.name, k))).collect();
    for source in sources {
        objects.push(compile_c(&b, dir, &source, &triple)?);
    }
    if writes_gnu_archive(&triple) {
        // The kernels' objects from memory, the C API's from its file, and
        // the weights' object (most of the bytes) streamed in last.
        let mut c_objects = Vec::new();
        for object in &objects[a.objects.len()..] {
            let bytes = std::fs::read(object).map_err(|e| format!("reading {}: {e}", object.display()))?;
            c_objects.push((object.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(), bytes));
        }
        // Member k of the objects is `<name>.<k>.o`; `<name>.o` is the weights'.
        let first = usize::from(!a.weights_in_library);
        let members: Vec<(String, &[u8])> = (a.objects.iter().map(Vec::as_slice))
            .enumerate()
            .map(|(k, bytes)| (object_file(&a.name, k + 1 - first), bytes))
            .chain(c_objects.iter().map(|(name, bytes)| (name.clone(), bytes.as_slice())))
            .collect();
        let library = dir.join(format!("lib{lib_name}.a"));
        if a.weights_in_library {
            return streamed_weights::write(a, &library, &members, target);
        }
        return write_gnu_archive(&library, &members, None);
    }
    let mut lib = cc::Build::new();
    lib.out_dir(dir).cargo_metadata(false).objects(&objects);
    #[allow(clippy::disallowed_methods)]
    if std::env::var("TARGET").is_err() {
        lib.target(crate::target::host_triple()).host(crate::target::host_triple());
    }
    lib.try_compile(lib_name).map_err(|e| format!("building the static library: {e}"))
}

/// Whether [`archive`] writes the library of `target` itself, from the
/// objects in memory (a GNU archive, no `AR` override); else cc's archiver
/// builds it from the object files.
pub(super) fn archives_from_memory(target: &str) -> bool {
    writes_gnu_archive(&c_triple(target))
}

/// [`archives_from_memory`] for the C triple `triple`.
fn writes_gnu_archive(triple: &str) -> bool {
    gnu_archive_target(triple) && !ar_overridden(triple)
}

/// cc's settings for the C sources of a build in `dir` for kiln's `target`.
fn c_compiler(dir: &Path, target: &str) -> cc::Build {
    let mut b = cc::Build::new();
    // No debug info: the objects must not depend on the directory they were built in.
    b.out_dir(dir).cargo_metadata(false).warnings(false).debug(false).std("c99").opt_level(2);
    // Outside a build script cc needs the target spelled out.
    #[allow(clippy::disallowed_methods)]
    if std::env::var("TARGET").is_err() {
        b.target(&c_triple(target)).host(crate::target::host_triple());
    }
    b
}

/// The Rust target triple the C sources are compiled for: cargo's in a build
/// script, else the one kiln's `target` names (the host's by default).
fn c_triple(target: &str) -> String {
    #[allow(clippy::disallowed_methods)]
    std::env::var("TARGET").unwrap_or_else(|_| {
        crate::target::target_option(target, "-mtriple=").map_or(crate::target::host_triple().to_string(), cc_triple)
    })
}

/// Compile the C API source `c_api` of model `name` into its object in
/// `dir` (the file `archive` then finds under the same key) — run beside
/// LLVM, whose back end otherwise leaves the C compiler's ~0.3 s to the end
/// of a cold build. The source includes the model's `header`, written here
/// too (without it, a cold build's compile failed and `archive` compiled it
/// again after LLVM). A failure is left for `archive` to report.
pub(super) fn prebuild_c_api(dir: &Path, name: &str, c_api: &str, header: &str, target: &str) {
    let source = format!("{name}_api.c");
    if write_if_changed(&dir.join(format!("{name}.h")), header.as_bytes()).is_ok()
        && write_if_changed(&dir.join(&source), c_api.as_bytes()).is_ok()
    {
        let _ = compile_c(&c_compiler(dir, target), dir, &source, &c_triple(target));
    }
}

/// Whether the static library of `triple` is a GNU archive (Linux and other
/// ELF systems; not Apple's, whose archives differ, nor Windows').
fn gnu_archive_target(triple: &str) -> bool {
    !["apple", "darwin", "windows", "aix"].iter().any(|os| triple.contains(os))
}

/// Whether the environment names an archiver (cc's `AR`, `AR_<target>`,
/// `TARGET_AR`), which then builds the library as before.
fn ar_overridden(triple: &str) -> bool {
    #[allow(clippy::disallowed_methods)]
    ["AR", "TARGET_AR"].iter().flat_map(|v| cc_env_names(v, triple)).any(|n| std::env::var_os(n).is_some())
}

/// The names under which cc reads its setting `var` for `triple`: plain,
/// `<var>_<triple>` and `<var>_<triple with underscores>`.
fn cc_env_names(var: &str, triple: &str) -> [String; 3] {
    [var.to_string(), format!("{var}_{triple}"), format!("{var}_{}", triple.replace('-', "_"))]
}

/// A member written straight into an archive, last: its symbols read from
/// `symbols` (an object defining the same ones, without their bytes), its
/// bytes from `write` — never held in memory.
pub(super) struct StreamedMember<'a> {
    pub name: String,
    pub symbols: Vec<u8>,
    #[allow(clippy::type_complexity)]
    pub write: Box<dyn FnOnce(&mut dyn Write) -> std::io::Result<()> + 'a>,
}

/// The size field of a GNU archive member header: bytes 48..58 of its 60.
const SIZE_FIELD: std::ops::Range<usize> = 48..58;
const HEADER_LEN: u64 = 60;

/// Write the GNU archive `path` of the named objects `members` (then
/// `last`), with its symbol table, in one pass, over the old library in
/// place (see `write_in_place`: a rebuild after a weights-only change
/// writes a library of the same size). `last` goes in as its symbols'
/// object — the archive's symbol table and its header are then right but
/// for the size — and is streamed over that object, its size patched in.
fn write_gnu_archive(path: &Path, members: &[(String, &[u8])], last: Option<StreamedMember>) -> Result<(), String> {
    use ar_archive_writer::{write_archive_to_stream, ArchiveKind, NewArchiveMember, DEFAULT_OBJECT_READER};
    use std::io::{Seek, SeekFrom};
    let (stand_in, write) = match last {
        Some(StreamedMember { name, symbols, write }) => (Some((name, symbols)), Some(write)),
        None => (None, None),
    };
    let members: Vec<NewArchiveMember> =
        (members.iter().cloned().chain(stand_in.as_ref().map(|(name, symbols)| (name.clone(), symbols.as_slice()))))
            .map(|(name, bytes)| NewArchiveMember::new(bytes, &DEFAULT_OBJECT_READER, name))
            .collect();
    let written = crate::codegen::write_in_place(path, |out| {
        write_archive_to_stream(out, &members, ArchiveKind::Gnu, false, false)?;
        let (Some((_, symbols)), Some(write)) = (&stand_in, write) else { return Ok(()) };
        // The stand-in is the archive's last member: its bytes end the
        // file but for a byte of padding to an even length.
        let len = symbols.len() as u64;
        let data = out.stream_position()? - len % 2 - len;
        let header = data - HEADER_LEN;
        out.flush()?;
        let mut bytes = [0u8; HEADER_LEN as usize];
        std::os::unix::fs::FileExt::read_exact_at(out.get_ref(), &mut bytes, header)?;
        let size = std::str::from_utf8(&bytes[SIZE_FIELD]).ok().and_then(|f| f.trim().parse::<u64>().ok());
        if size != Some(len) || &bytes[58..] != b"`\n" {
            return Err(std::io::Error::other("the archive writer did not end with the weights' member"));
        }
        out.seek(SeekFrom::Start(data))?;
        write(out)?;
        let size = out.stream_position()? - data;
        if size % 2 == 1 {
            out.write_all(b"\n")?;
        }
        let end = out.stream_position()?;
        let field = format!("{size:<10}");
        if field.len() != SIZE_FIELD.len() {
            return Err(std::io::Error::other(format!("a member of {size} bytes is too large for a GNU archive")));
        }
        out.seek(SeekFrom::Start(header + SIZE_FIELD.start as u64))?;
        out.write_all(field.as_bytes())?;
        out.seek(SeekFrom::Start(end))?;
        Ok(())
    });
    written.map_err(|e| format!("writing the static library {}: {e}", path.display()))
}

/// The weights' object streamed into the library (LLVM targets).
mod streamed_weights {
    use super::Artifacts;
    use std::path::Path;

    /// Write `library` with `members`, then the weights of `a`'s plan as
    /// the object `<name>.o`, written for `target` by kiln.
    #[cfg(feature = "llvm")]
    pub(super) fn write(
        a: &Artifacts,
        library: &Path,
        members: &[(String, &[u8])],
        target: &str,
    ) -> Result<(), String> {
        use super::{object_file, write_gnu_archive, StreamedMember};
        use crate::codegen::llvm::{data_object_symbols, stream_data_object, DataSymbol, LlvmTarget};
        let target = LlvmTarget::parse(target).map_err(|e| e.to_string())?;
        let data: Vec<DataSymbol> = (crate::build::glue::constant_symbols(&a.name, &a.plan).into_iter())
            .map(|(symbol, bytes)| DataSymbol { symbol, bytes })
            .collect();
        let unsupported = || format!("kiln writes no weights' object for `{}`", target.triple);
        let symbols = data_object_symbols(&target, &data).ok_or_else(unsupported)?;
        let write = Box::new(|out: &mut dyn std::io::Write| {
            stream_data_object(&target, &data, out).unwrap_or_else(|| Err(std::io::Error::other(unsupported())))
        });
        write_gnu_archive(library, members, Some(StreamedMember { name: object_file(&a.name, 0), symbols, write }))
    }

    /// Without LLVM no build streams its weights (the C target embeds them in its source).
    #[cfg(not(feature = "llvm"))]
    pub(super) fn write(_: &Artifacts, _: &Path, _: &[(String, &[u8])], _: &str) -> Result<(), String> {
        Err("a weights' object without kiln's `llvm` feature".into())
    }
}

/// Compile `dir/<source>` into `dir/<source stem>.o` with `b`'s compiler and
/// flags, run in `dir` on the bare file name so the object does not name the
/// directory (cc's own `compile` hashes the path into the object's name).
fn compile_c(b: &cc::Build, dir: &Path, source: &str, triple: &str) -> Result<PathBuf, String> {
    let object = format!("{}.o", source.trim_end_matches(".c"));
    // The C API's source changes with the model's shapes, not its weights:
    // an object compiled from the same source for the same target, under the
    // same compiler settings (cc's environment variables), is reused. The key
    // is found without asking cc for the compiler, which runs it (from a
    // process that holds the model's weights) to detect its family.
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::fs::read(dir.join(source)).map_err(|e| format!("reading {source}: {e}"))?.hash(&mut h);
    triple.hash(&mut h);
    for var in ["CC", "CFLAGS", "TARGET_CC", "TARGET_CFLAGS", "CRATE_CC_NO_DEFAULTS", "PATH"] {
        for name in cc_env_names(var, triple) {
            #[allow(clippy::disallowed_methods)]
            std::env::var_os(&name).hash(&mut h);
        }
    }
    // The flags `archive` gives cc are kiln's code.
    hash_kiln_binary(&mut h);
    let key = format!("{:016x}", h.finish());
    let key_file = dir.join(format!("{object}.key"));
    if dir.join(&object).exists() && std::fs::read_to_string(&key_file).ok().as_deref() == Some(key.as_str()) {
        return Ok(dir.join(object));
    }
    let _ = std::fs::remove_file(&key_file);
    let tool = b.try_get_compiler().map_err(|e| format!("finding the C compiler: {e}"))?;
    let out = tool
        .to_command()
        .current_dir(dir)
        .args(["-I", ".", "-c", source, "-o", &object])
        .output()
        .map_err(|e| format!("running the C compiler `{}`: {e}", tool.path().display()))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` rejected {source}: {}",
            tool.path().display(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    // A cache that cannot be written only costs the next build its time.
    let _ = std::fs::write(&key_file, key);
    Ok(dir.join(object))
}

/// An LLVM triple as the Rust target `cc` knows (`aarch64-linux-gnu` →
/// `aarch64-unknown-linux-gnu`); others pass through.
fn cc_triple(llvm: &str) -> String {
    let parts: Vec<&str> = llvm.split('-').collect();
    match parts.as_slice() {
        [arch, "linux", env] => format!("{arch}-unknown-linux-{env}"),
        [arch, "pc", "linux", env] => format!("{arch}-unknown-linux-{env}"),
        _ => llvm.to_string(),
    }
}

#[cfg(all(test, feature = "llvm"))]
mod tests {
    use super::*;
    use crate::codegen::llvm::{data_object_symbols, stream_data_object, DataSymbol, LlvmTarget};

    /// A member streamed in last, its symbols read from a stand-in, makes
    /// the archive that the whole member makes, byte for byte — over an
    /// old, longer library, for weights of odd and even sizes.
    #[test]
    fn a_streamed_last_member_writes_the_archive_the_whole_member_writes() {
        let target = LlvmTarget::parse("llvm -mcpu=x86-64 -mtriple=x86_64-unknown-linux-gnu").expect("a target");
        let kernel = data_object_symbols(&target, &[DataSymbol { symbol: "kernel".into(), bytes: &[] }]).expect("ELF");
        let dir = tempfile::tempdir().expect("dir");
        for n in [3usize, 64, 1001] {
            let (a, b) = (vec![7u8; n], vec![1u8; 2 * n + 1]);
            let data = [DataSymbol { symbol: "w_a".into(), bytes: &a }, DataSymbol { symbol: "w_b".into(), bytes: &b }];
            let mut whole = Vec::new();
            stream_data_object(&target, &data, &mut whole).expect("ELF").expect("written");
            let members = [("m.1.o".to_string(), kernel.as_slice())];
            let (plain, streamed) = (dir.path().join("plain.a"), dir.path().join("streamed.a"));
            let all = [members[0].clone(), ("m.o".to_string(), whole.as_slice())];
            write_gnu_archive(&plain, &all, None).expect("the plain archive");
            std::fs::write(&streamed, vec![0xAB; 1 << 16]).expect("an old library");
            let write = Box::new(|out: &mut dyn Write| stream_data_object(&target, &data, out).expect("ELF"));
            let symbols = data_object_symbols(&target, &data).expect("ELF");
            let last = StreamedMember { name: "m.o".into(), symbols, write };
            write_gnu_archive(&streamed, &members, Some(last)).expect("the streamed archive");
            assert_eq!(std::fs::read(&plain).expect("read"), std::fs::read(&streamed).expect("read"), "{n} bytes");
        }
    }
}
