kiln::relay_model! {
    fn model(x: Tensor<[2, 3], f32>, y: Tensor<[4], f32>) -> Tensor<[2, 3], f32> {
        let z = exp(x);
        z + y
    }
}
fn main() {}
