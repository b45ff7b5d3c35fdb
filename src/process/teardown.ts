// What a start-up must undo, in reverse order: what started last stops first. A step that fails
// does not keep the others from running; run() runs the steps once however often it is called.
export class Teardown {
  private readonly steps: Array<() => unknown> = [];
  private running: Promise<void> | null = null;

  /** `onError` receives each failed step's error; without it run() rejects with the first one, after every step ran. */
  constructor(private readonly onError?: (err: unknown) => void) {}

  add(step: () => unknown): void {
    this.steps.push(step);
  }

  run(): Promise<void> {
    this.running ??= (async () => {
      const errors: unknown[] = [];
      for (const step of this.steps.splice(0).reverse()) {
        try {
          await step();
        } catch (err) {
          if (this.onError) this.onError(err);
          else errors.push(err);
        }
      }
      if (errors.length) throw errors[0];
    })();
    return this.running;
  }
}
