/* Reset for QEMU's mps2-an386 (Cortex-M4F): the vector table, the FPU
 * switched on, .bss zeroed, newlib's semihosting set up, then main(). */
#include <stdint.h>
#include <stdlib.h>

extern uint32_t __bss_start__, __bss_end__, __stack_top__;
extern int main(void);
extern void initialise_monitor_handles(void);

void Reset_Handler(void) {
  uint32_t* p;
  /* CPACR: full access to CP10 and CP11 (the FPU) before any float instruction. */
  *(volatile uint32_t*)0xE000ED88u |= 0xFu << 20;
  __asm volatile("dsb\n isb");
  for (p = &__bss_start__; p < &__bss_end__; p++) *p = 0;
  initialise_monitor_handles();
  exit(main());
}

static void Fault_Handler(void) {
  for (;;) {
  }
}

__attribute__((section(".vectors"), used)) void* const vectors[16] = {
    &__stack_top__, (void*)Reset_Handler, (void*)Fault_Handler, (void*)Fault_Handler,
    (void*)Fault_Handler, (void*)Fault_Handler, (void*)Fault_Handler,
};
