//! The weights' object file written directly, where its format is simple
//! (ELF on x86-64 and AArch64 Linux): a read-only data section per weight,
//! 64-byte aligned, under the weight's global symbol — what LLVM
//! emits for the same globals, without first copying every weight byte into
//! an LLVM constant and hashing it (most of a rebuild after the weights
//! changed). Other targets go through LLVM.

use object::write::{Object, StandardSection, Symbol, SymbolSection};
use object::{Architecture, BinaryFormat, Endianness, SymbolFlags, SymbolKind, SymbolScope};

use super::DataSymbol;

/// The alignment of every weight (the kernels' vector loads assume it).
const WEIGHT_ALIGN: u64 = 64;

/// The relocatable object defining `data` for `triple`, or `None` where
/// LLVM must write it (another architecture or object format).
pub(super) fn elf_data_object(triple: &str, data: &[DataSymbol<'_>]) -> Option<Vec<u8>> {
    elf_data(triple, data)?.write().ok()
}

/// [`elf_data_object`] streamed into `out` instead of memory (ResNet-18's
/// weights are 97 MB: a buffer of that size cost 60–80 ms of page faults on
/// a 2-core VM) — the static library's weights member, written in place.
/// `None` where LLVM must write the object.
pub(super) fn stream_elf_data_object(
    triple: &str,
    data: &[DataSymbol<'_>],
    out: &mut dyn std::io::Write,
) -> Option<std::io::Result<()>> {
    let obj = elf_data(triple, data)?;
    let mut stream = object::write::StreamingBuffer::new(out);
    Some(obj.emit(&mut stream).map_err(|e| std::io::Error::other(e.to_string())).and_then(|()| stream.result()))
}

/// An object defining the symbols of [`elf_data_object`] without their
/// bytes: what an archive writer reads the weights member's symbol table
/// from before the member itself is streamed. `None` where LLVM must write
/// the object.
pub(super) fn elf_symbols_object(triple: &str, data: &[DataSymbol<'_>]) -> Option<Vec<u8>> {
    let empty: Vec<DataSymbol> = data.iter().map(|d| DataSymbol { symbol: d.symbol.clone(), bytes: &[] }).collect();
    elf_data_object(triple, &empty)
}

/// The architecture of an ELF target kiln writes data objects for
/// (x86-64 and AArch64 Linux); `None` for the others, which LLVM serves.
pub(super) fn elf_architecture(triple: &str) -> Option<Architecture> {
    let arch = match triple.split('-').next()? {
        "x86_64" => Architecture::X86_64,
        "aarch64" => Architecture::Aarch64,
        _ => return None,
    };
    triple.contains("linux").then_some(arch)
}

/// The object of [`elf_data_object`], not yet written.
fn elf_data<'a>(triple: &str, data: &[DataSymbol<'a>]) -> Option<Object<'a>> {
    let arch = elf_architecture(triple)?;
    let mut obj = Object::new(BinaryFormat::Elf, arch, Endianness::Little);
    for d in data {
        // A section per weight (`.rodata.<symbol>`, as `-fdata-sections` makes),
        // its data borrowed: the bytes are copied once, into the object. One
        // section grown weight by weight copied ResNet-18's 75 MB over again.
        let section = obj.add_subsection(StandardSection::ReadOnlyData, d.symbol.as_bytes());
        obj.set_section_data(section, d.bytes, WEIGHT_ALIGN);
        obj.add_symbol(Symbol {
            name: d.symbol.as_bytes().to_vec(),
            value: 0,
            size: d.bytes.len() as u64,
            kind: SymbolKind::Data,
            scope: SymbolScope::Dynamic,
            weak: false,
            section: SymbolSection::Section(section),
            flags: SymbolFlags::None,
        });
    }
    Some(obj)
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object as _, ObjectSection as _, ObjectSymbol as _};

    /// Each weight reads back from the object under its symbol, aligned, with its size.
    #[test]
    fn weights_read_back_under_their_symbols() {
        let (a, b) = ([1u8, 2, 3], [7u8; 100]);
        let data = [DataSymbol { symbol: "w_a".into(), bytes: &a }, DataSymbol { symbol: "w_b".into(), bytes: &b }];
        for triple in ["x86_64-unknown-linux-gnu", "aarch64-linux-gnu"] {
            let bytes = elf_data_object(triple, &data).expect("an ELF target");
            let file = object::File::parse(&*bytes).expect("a valid object");
            for d in &data {
                let sym = file.symbols().find(|s| s.name() == Ok(d.symbol.as_str())).expect("the symbol");
                assert!(sym.is_global() && sym.is_definition());
                assert_eq!((sym.size(), sym.address() % WEIGHT_ALIGN), (d.bytes.len() as u64, 0));
                let section = file.section_by_index(sym.section_index().expect("in a section")).expect("section");
                let contents = section.data().expect("contents");
                let start = (sym.address() - section.address()) as usize;
                assert_eq!(&contents[start..start + d.bytes.len()], d.bytes);
            }
        }
        // Streamed, the same bytes; without the bytes, the same symbols.
        let mut streamed = Vec::new();
        stream_elf_data_object("x86_64-unknown-linux-gnu", &data, &mut streamed)
            .expect("an ELF target")
            .expect("written");
        let in_memory = elf_data_object("x86_64-unknown-linux-gnu", &data).expect("an ELF target");
        assert_eq!(streamed, in_memory);
        let symbols = elf_symbols_object("x86_64-unknown-linux-gnu", &data).expect("an ELF target");
        let file = object::File::parse(&*symbols).expect("a valid object");
        for d in &data {
            let sym = file.symbols().find(|s| s.name() == Ok(d.symbol.as_str())).expect("the symbol");
            assert!(sym.is_global() && sym.is_definition());
        }
        assert!(elf_data_object("thumbv7em-none-eabihf", &data).is_none());
        assert!(elf_data_object("x86_64-apple-darwin", &data).is_none());
    }
}
