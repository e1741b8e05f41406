//! A 10 000-deep chain of `add`s goes through every layer — print, parse,
//! type inference, visitor, mutator, structural equality and hashing, the
//! interpreter — on a thread with a small (2 MiB) stack: nothing recurses on
//! expression depth.

use kiln_ir::attrs::Attrs;
use kiln_ir::relay::{
    eval_function, infer_module, mutate, parse_module, print_module, structural_eq, structural_hash, visit, ExprId,
    ExprMutator, ExprVisitor, IRModule, Store, Type, Value,
};
use kiln_ir::{DataType, Tensor};

const N: usize = 10_000;

fn chain() -> IRModule {
    let mut s = Store::new();
    let x = s.var("x", Some(Type::tensor([2], DataType::F32)));
    let mut e = x;
    for _ in 0..N {
        e = s.call_op("add", vec![e, x], Attrs::new()).expect("add");
    }
    let f = s.function(vec![x], e, None, Attrs::new());
    IRModule::from_main(s, f).expect("module")
}

struct Count(usize);
impl ExprVisitor for Count {
    fn visit_call(&mut self, _: &Store, _: ExprId) {
        self.0 += 1;
    }
}

struct AddToSub;
impl ExprMutator for AddToSub {
    fn rewrite_call(&mut self, store: &mut Store, _: ExprId, post: ExprId) -> ExprId {
        let args = store.as_call(post).map(|c| c.args.clone()).unwrap_or_default();
        store.call_op("subtract", args, Attrs::new()).expect("subtract")
    }
}

fn run_everything() {
    let mut m = chain();
    infer_module(&mut m).expect("infer");
    let text = print_module(&m);
    assert_eq!(text.lines().filter(|l| l.contains("= add(")).count(), N - 1);
    let mut back = parse_module(&text).expect("parse");
    infer_module(&mut back).expect("infer the reparsed chain");
    assert_eq!(print_module(&back), text);
    let (f, g) = (m.main().expect("main"), back.main().expect("main"));
    assert!(structural_eq(&m.store, f, &back.store, g));
    assert_eq!(structural_hash(&m.store, f), structural_hash(&back.store, g));
    let mut c = Count(0);
    visit(&m.store, &[f], &mut c);
    assert_eq!(c.0, N);
    let sub = mutate(&mut m.store, f, &mut AddToSub);
    m.update_function("main", sub).expect("update");
    let x = Tensor::from_f64(DataType::F32, vec![2], &[1.0, 2.0]);
    let Value::Tensor(out) = eval_function(&m, "main", &[Value::Tensor(x)]).expect("eval") else { panic!("tuple") };
    // x - x - x - … : 1 - 10000·1 and 2 - 10000·2.
    assert_eq!(out.to_f64_vec(), vec![1.0 - N as f64, 2.0 - 2.0 * N as f64]);
}

#[test]
fn ten_thousand_deep_chain_on_a_small_stack() {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(run_everything)
        .expect("thread")
        .join()
        .expect("no stack overflow");
}
