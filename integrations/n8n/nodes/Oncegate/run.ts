/**
 * The run an item belongs to travels in the item, under `json.oncegate`:
 * every Oncegate node writes the run's namespace, key, fencing version and
 * current lease there, and every owner operation reads it back. Nobody types
 * a lease. When nodes in between replaced the item's JSON (an HTTP Request,
 * a model call), the run is found on the nearest Oncegate node upstream,
 * through n8n's paired items, so each item of a batch keeps its own run.
 */
import type { IDataObject } from 'n8n-workflow';

export const ITEM_FIELD = 'oncegate';

export interface RunRef {
	namespace: string;
	key: string;
	lease: string;
}

/** The run in an item's JSON, when it holds one with a lease. */
export function runIn(json: unknown): RunRef | undefined {
	if (!json || typeof json !== 'object') return undefined;
	const run = (json as IDataObject)[ITEM_FIELD] as IDataObject | undefined;
	if (!run || typeof run !== 'object') return undefined;
	const { namespace, key, lease } = run;
	if (typeof namespace === 'string' && typeof key === 'string' && typeof lease === 'string' && lease) {
		return { namespace, key, lease };
	}
	return undefined;
}

/**
 * The first run found: in the item itself, else in the paired item of each
 * upstream Oncegate node, nearest first. `upstream` yields those items'
 * JSON lazily (a node that did not run for this item yields nothing).
 */
export function findRun(
	json: unknown,
	upstream: Iterable<() => unknown>,
): RunRef | undefined {
	const own = runIn(json);
	if (own) return own;
	for (const read of upstream) {
		let found: RunRef | undefined;
		try {
			found = runIn(read());
		} catch {
			found = undefined;
		}
		if (found) return found;
	}
	return undefined;
}

/** The item's JSON with the run's latest state under `oncegate`. */
export function withRun(json: IDataObject, answer: IDataObject, keep: RunRef | undefined): IDataObject {
	const previous = (json[ITEM_FIELD] as IDataObject | undefined) ?? {};
	const run: IDataObject = { ...previous, ...answer };
	// A move that ends the lease answers `lease: null`; keep namespace and key.
	if (keep) {
		run.namespace = run.namespace ?? keep.namespace;
		run.key = run.key ?? keep.key;
	}
	return { ...json, [ITEM_FIELD]: run };
}
