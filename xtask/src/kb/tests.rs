use super::*;

#[test]
fn kb_loads_and_is_consistent() {
    let kb = kb();
    assert!(!kb.torch_arch_lists.is_empty());
}
