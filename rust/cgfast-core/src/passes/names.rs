//! Kernel names as both the driver (mangled) and the profiler (demangled, by its own
//! demangler) spell them, reduced to what the two spellings agree on, so that a
//! replay's kernels meet the recorded graph's nodes.

use rustc_hash::FxHashMap as HashMap;

use crate::annotations::NodeKind;

/// Names reduced to what both the driver's (mangled) and the profiler's (demangled)
/// spellings agree on.
#[derive(Default)]
pub(crate) struct NameKeys {
    ids: HashMap<String, u32>,
}

impl NameKeys {
    fn id(&mut self, text: String) -> u32 {
        let next = self.ids.len() as u32;
        *self.ids.entry(text).or_insert(next)
    }

    /// (full, base) keys of a kernel name, mangled or not; memcpy/memset by kind.
    pub(crate) fn keys(&mut self, kind: NodeKind, name: Option<&str>) -> (u32, u32) {
        let name = match kind {
            NodeKind::Kernel => name.unwrap_or(""),
            NodeKind::Memcpy => "<memcpy>",
            NodeKind::Memset => "<memset>",
        };
        let readable = demangle(name);
        (self.id(canonical(&readable)), self.id(format!("base:{}", base_name(&readable))))
    }
}

/// A mangled name demangled without return types (cpp_demangle prints nested ones
/// that the profiler's demangler leaves out); other names as they are.
fn demangle(name: &str) -> String {
    if !name.starts_with("_Z") {
        return name.to_string();
    }
    let options = cpp_demangle::DemangleOptions::new().no_return_type();
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle_with_options(&options).ok())
        .unwrap_or_else(|| name.to_string())
}

/// A demangled signature without its return type (`void `, or one such as
/// `std::enable_if<!(false), void>::type ` that CUPTI writes for cuBLAS's gemv) and
/// without `[clone .x]` suffixes: the name starts after the last space outside brackets
/// before the parameter list (the first `(` outside brackets that opens no
/// `(anonymous namespace)`).
fn without_return_type(readable: &str) -> &str {
    const ANONYMOUS: &str = "(anonymous namespace)";
    let mut text = readable.trim();
    while let Some(head) = text.strip_suffix(']').and_then(|t| t.rfind(" [clone ").map(|at| &t[..at])) {
        text = head.trim_end();
    }
    let bytes = text.as_bytes();
    let (mut depth, mut start, mut i) = (0i32, 0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'(' if depth == 0 && text[i..].starts_with(ANONYMOUS) => i += ANONYMOUS.len() - 1,
            b'(' if depth == 0 => break,
            b'<' | b'(' | b'{' | b'[' => depth += 1,
            b'>' | b')' | b'}' | b']' => depth -= 1,
            b' ' if depth == 0 => start = i + 1,
            _ => {}
        }
        i += 1;
    }
    // `operator<`, `operator>>` and the like unbalance the count: keep such names whole
    if depth != 0 {
        return text;
    }
    &text[start..]
}

/// What the profiler's and cpp_demangle's spellings of one kernel have in common: no
/// leading return type, no white space, and no `const` or `&` (which the two demanglers
/// place differently on lambda types).
fn canonical(readable: &str) -> String {
    let body = without_return_type(readable);
    let mut out = String::with_capacity(body.len());
    let mut rest = body;
    while let Some(at) = rest.find("const") {
        let (before, after) = rest.split_at(at);
        let word_start = before.chars().next_back().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let word_end = after[5..].chars().next().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        out.push_str(before);
        if !(word_start && word_end) {
            out.push_str("const");
        }
        rest = &after[5..];
    }
    out.push_str(rest);
    out.retain(|c| !c.is_whitespace() && c != '&');
    literal_suffixes(&out)
}

/// Integer template arguments as the profiler writes them (`3ul`, `5ll`), where
/// cpp_demangle writes casts (`(unsigned long)3`); in text without white space.
fn literal_suffixes(text: &str) -> String {
    const CASTS: [(&str, &str); 5] = [
        ("(unsignedlonglong)", "ull"),
        ("(longlong)", "ll"),
        ("(unsignedlong)", "ul"),
        ("(unsignedint)", "u"),
        ("(long)", "l"),
    ];
    if !text.contains(")") {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    'scan: while let Some(at) = rest.find('(') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        for (cast, suffix) in CASTS {
            if let Some(after) = rest.strip_prefix(cast) {
                let digits = after
                    .char_indices()
                    .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
                    .map_or(after.len(), |(i, _)| i);
                if digits > 0 && after[..digits] != *"-" {
                    out.push_str(&after[..digits]);
                    out.push_str(suffix);
                    rest = &after[digits..];
                    continue 'scan;
                }
            }
        }
        out.push('(');
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

/// `void ns::kernel<T>(args)` -> `ns::kernel`.
fn base_name(readable: &str) -> String {
    const ANONYMOUS: &str = "(anonymous namespace)";
    let readable = without_return_type(readable);
    let mut from = 0;
    let end = loop {
        match readable[from..].find(['<', '(']) {
            None => break readable.len(),
            Some(k) if readable[from + k..].starts_with(ANONYMOUS) => from += k + ANONYMOUS.len(),
            Some(k) => break from + k,
        }
    };
    readable[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{Cat, TraceIndex};
    use crate::read::scan::ScanFailure;
    use crate::CancelToken;

    fn scan(path: &std::path::Path) -> Result<TraceIndex, ScanFailure> {
        let no_keys = crate::read::scan::WriteKeys::default();
        Ok(crate::read::scan::scan(path, &no_keys, 2, &CancelToken::new(), &mut |_, _| {})?.0)
    }

    const PAIRS: [(&str, &str); 5] = [
        (
            "_ZN8internal5gemvx6kernelIiiffffLb0ELb1ELb1ELb0ELi7ELb0E18cublasGemvParamsExIi30cublasGemvTensorStridedBatchedIKfES5_S3_IfEfEEENSt9enable_ifIXntT5_EvE4typeET11_",
            "std::enable_if<!(false), void>::type internal::gemvx::kernel<int, int, float, float, float, float, false, true, true, false, 7, false, cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float> >(cublasGemvParamsEx<int, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float const>, cublasGemvTensorStridedBatched<float>, float>)",
        ),
        ("_ZN2at6native12_GLOBAL__N_110add_kernelEPKfPfi.constprop.0", "void at::native::(anonymous namespace)::add_kernel(float const*, float*, int) [clone .constprop.0]"),
        (
            "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastINS0_10AbsFunctorIfEEEEvRNS_18TensorIteratorBaseERKT_EUliE_EEviT1_",
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::AbsFunctor<float> >(at::TensorIteratorBase&, at::native::AbsFunctor<float> const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::AbsFunctor<float> >(at::TensorIteratorBase&, at::native::AbsFunctor<float> const&)::{lambda(int)#1})",
        ),
        (
            "_ZN2at6native18elementwise_kernelILi128ELi2EZNS0_22gpu_kernel_impl_nocastIZZZNS0_10glu_kernelERNS_18TensorIteratorBaseEENKUlvE_clEvENKUlvE0_clEvEUlffE_EEvS4_RKT_EUliE_EEviT1_",
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::glu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float)#1}>(at::TensorIteratorBase&, at::native::glu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float)#1} const&)::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::glu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float)#1}>(at::TensorIteratorBase&, at::native::glu_kernel(at::TensorIteratorBase&)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::{lambda(float, float)#1} const&)::{lambda(int)#1})",
        ),
        ("_ZN2at6native12_GLOBAL__N_110add_kernelEPKfPfi", "at::native::(anonymous namespace)::add_kernel(float const*, float*, int)"),
    ];

    #[test]
    fn driver_and_profiler_names_meet() {
        let mut keys = NameKeys::default();
        for (mangled, profiler) in PAIRS {
            assert_eq!(
                keys.keys(NodeKind::Kernel, Some(mangled)),
                keys.keys(NodeKind::Kernel, Some(profiler)),
                "{profiler}"
            );
        }
        assert_ne!(
            keys.keys(NodeKind::Kernel, Some(PAIRS[0].0)),
            keys.keys(NodeKind::Kernel, Some(PAIRS[1].0))
        );
        assert_eq!(
            keys.keys(NodeKind::Kernel, Some("triton_poi_fused_add_0")),
            keys.keys(NodeKind::Kernel, Some("triton_poi_fused_add_0"))
        );
        assert_eq!(
            base_name("void at::native::(anonymous namespace)::k<int>(int)"),
            "at::native::(anonymous namespace)::k"
        );
        assert_eq!(base_name(PAIRS[0].1), "internal::gemvx::kernel");
        assert_eq!(without_return_type("bool operator<(A, B)"), "bool operator<(A, B)");
        // c++filt's (and CUPTI's) integer literals, against cpp_demangle's casts
        assert_eq!(
            keys.keys(NodeKind::Kernel, Some("_Z1fILx5ELy6ELj7ELl8ELln2ELs9ELm3EEvv")),
            keys.keys(NodeKind::Kernel, Some("void f<5ll, 6ull, 7u, 8l, -2l, (short)9, 3ul>()"))
        );
        assert_ne!(
            keys.keys(NodeKind::Kernel, Some("_Z1fILm3EEvv")),
            keys.keys(NodeKind::Kernel, Some("void f<3u>()"))
        );
        assert_eq!(canonical("void f(Foo const&, constant_t)"), "f(Foo,constant_t)");
    }

    /// The kernel names of a trace and the driver names of its annotations' graphs.
    fn example_names(dir: &std::path::Path) -> Option<(Vec<String>, Vec<String>)> {
        let trace = dir.join("000000.h200.pt.trace.json.gz");
        let annotations = std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().contains("kernel_annotations"))?;
        let annotations = crate::annotations::file::read(&annotations).ok()?;
        let index = scan(&trace).ok()?;
        let profiler = index
            .events
            .iter()
            .filter(|e| e.cat == Cat::Kernel)
            .map(|e| index.name_of(e).to_string())
            .collect();
        let driver = annotations.graphs.values().flatten().filter_map(|n| n.name.clone()).collect();
        Some((profiler, driver))
    }

    /// A bundled trace's folder (`examples/` also holds scripts, folders of them and
    /// their `__pycache__`).
    fn is_example_dir(entry: &std::fs::DirEntry) -> bool {
        let holds_a_trace = |dir: &std::path::Path| {
            std::fs::read_dir(dir).is_ok_and(|mut files| {
                files.any(|f| f.is_ok_and(|f| f.file_name().to_string_lossy().ends_with(".pt.trace.json.gz")))
            })
        };
        entry.path().is_dir()
            && !entry.file_name().to_string_lossy().starts_with(['_', '.'])
            && holds_a_trace(&entry.path())
    }

    #[test]
    fn every_driver_name_of_the_examples_meets_a_profiler_name() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let mut checked = 0;
        for dir in std::fs::read_dir(&root).unwrap().flatten().filter(is_example_dir) {
            let (profiler, driver) =
                example_names(&dir.path()).expect("an example with a trace and annotations");
            let mut keys = NameKeys::default();
            let seen: rustc_hash::FxHashSet<(u32, u32)> =
                profiler.iter().map(|n| keys.keys(NodeKind::Kernel, Some(n))).collect();
            for name in &driver {
                assert!(
                    seen.contains(&keys.keys(NodeKind::Kernel, Some(name))),
                    "{}: {name} meets no kernel of the trace",
                    dir.path().display()
                );
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
    }

    #[test]
    fn every_profiler_name_of_the_fixtures_keeps_its_function_name() {
        // The H200 fixtures have no annotations: each name, with its return type gone,
        // must start with the function's qualified name, whatever its return type was.
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/h200");
        let Ok(files) = std::fs::read_dir(&root) else { return };
        let mut checked = 0;
        for file in files.flatten() {
            let index = scan(&file.path()).unwrap();
            for e in index.events.iter().filter(|e| e.cat == Cat::Kernel) {
                let name = index.name_of(e);
                let bare = without_return_type(name);
                let function = base_name(name).replace("(anonymous namespace)", "");
                assert!(
                    name.ends_with(bare) && !function.is_empty() && !function.contains([' ', '(', ')']),
                    "{name}"
                );
                assert_eq!(name.contains('('), bare.contains('('), "{name}");
                checked += 1;
            }
        }
        assert!(checked > 0);
    }
}
