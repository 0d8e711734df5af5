// Every plotted trial of a study as columns, as GET /v1/studies/{id}/points answers them:
// a few numbers a trial, so that 100,000 of them load and draw in a moment. Later answers
// (?since=cursor) are merged in: a trial seen before is updated in place.

export class PointCloud {
  constructor(objectives) {
    this.objectives = objectives;
    this.numbers = [];
    this.values = Object.fromEntries(objectives.map((name) => [name, []]));
    this.onFront = [];
    this.feasible = [];
    this.screenedOut = [];
    this.position = new Map(); // trial number -> index in the columns
    this.baseline = null; // its trial number
    this.cursor = 0;
    this.screened = 0; // how many are screened out (no values: not plotted)
  }

  get length() {
    return this.numbers.length;
  }

  /** Merge one answer of the points endpoint; how many trials it carried. */
  merge(body) {
    const n = body.numbers.length;
    for (let k = 0; k < n; k++) {
      const number = body.numbers[k];
      let i = this.position.get(number);
      if (i === undefined) {
        i = this.numbers.length;
        this.position.set(number, i);
        this.numbers.push(number);
      } else if (this.screenedOut[i]) {
        this.screened--;
      }
      for (const name of this.objectives) this.values[name][i] = body.values[name][k];
      this.onFront[i] = body.on_front[k];
      this.feasible[i] = body.feasible[k];
      this.screenedOut[i] = body.screened_out[k];
      if (body.screened_out[k]) this.screened++;
    }
    if (body.baseline !== null) this.baseline = body.baseline;
    this.cursor = body.cursor;
    return n;
  }

  /** The value of point i on an axis: an objective, or "#" for the trial number. */
  value(i, key) {
    return key === "#" ? this.numbers[i] : this.values[key][i];
  }

  /** Point i as the trial fields it has (no configuration: the trial's page has that). */
  trial(i) {
    const number = this.numbers[i];
    return {
      number,
      values: this.screenedOut[i] ? null : Object.fromEntries(this.objectives.map((name) => [name, this.values[name][i]])),
      on_front: this.onFront[i],
      feasible: this.feasible[i],
      is_baseline: number === this.baseline,
      state: this.screenedOut[i] ? "screened_out" : "completed",
    };
  }
}
