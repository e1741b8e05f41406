kiln::relay_model! {
    fn model(x: Tensor<[2, 3], f128>) -> Tensor<[2, 3], f32> {
        x
    }
}
fn main() {}
