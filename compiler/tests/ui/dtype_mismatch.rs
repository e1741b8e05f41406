kiln::relay_model! {
    fn model(x: Tensor<[2], f32>, i: Tensor<[2], i32>) -> Tensor<[2], f32> {
        x * i
    }
}
fn main() {}
