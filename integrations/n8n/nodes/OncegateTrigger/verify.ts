/**
 * Standard Webhooks verification of oncegate's signed forwards: the
 * `webhook-signature` header holds one or more `v1,<base64>` entries, each an
 * HMAC-SHA256 over `<webhook-id>.<webhook-timestamp>.<raw body>` under a
 * `whsec_<base64>` secret. Any configured secret may match any entry (so a
 * secret rotates without a gap), comparisons are constant-time, and a
 * timestamp outside the tolerance is refused as a replay.
 */
import { createHmac, timingSafeEqual } from 'crypto';

export const DEFAULT_TOLERANCE_SECONDS = 300;

export type Verdict =
	| { ok: true; id: string; timestamp: number }
	| { ok: false; reason: string };

type Headers = Record<string, string | string[] | undefined>;

function header(headers: Headers, name: string): string | undefined {
	const value = headers[name] ?? headers[name.toLowerCase()];
	if (Array.isArray(value)) return value.length === 1 ? value[0] : undefined;
	return value;
}

/** The secrets of a credential field: whitespace- or comma-separated `whsec_` values. */
export function parseSecrets(text: string): string[] {
	return text
		.split(/[\s,]+/)
		.map((s) => s.trim())
		.filter(Boolean);
}

function key(secret: string): Buffer {
	const encoded = secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret;
	if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) {
		throw new Error('a signing secret is not whsec_<base64>');
	}
	const bytes = Buffer.from(encoded, 'base64');
	if (bytes.length === 0) throw new Error('a signing secret is empty');
	return bytes;
}

/** Checks one delivery; `now` in seconds. */
export function verify(
	secrets: string[],
	headers: Headers,
	body: Buffer,
	now: number,
	toleranceSeconds = DEFAULT_TOLERANCE_SECONDS,
): Verdict {
	if (secrets.length === 0) return { ok: false, reason: 'no signing secret is configured' };
	const id = header(headers, 'webhook-id');
	const stamp = header(headers, 'webhook-timestamp');
	const signature = header(headers, 'webhook-signature');
	if (!id || !stamp || !signature) {
		return { ok: false, reason: 'missing webhook-id, webhook-timestamp or webhook-signature' };
	}
	if (!/^\d{1,12}$/.test(stamp)) return { ok: false, reason: 'webhook-timestamp is not a number' };
	const timestamp = Number(stamp);
	if (Math.abs(now - timestamp) > toleranceSeconds) {
		return { ok: false, reason: 'webhook-timestamp is outside the tolerance' };
	}
	const given = signature
		.split(' ')
		.map((entry) => entry.split(','))
		.filter(([version, value]) => version === 'v1' && value)
		.map(([, value]) => Buffer.from(value, 'base64'));
	if (given.length === 0) return { ok: false, reason: 'webhook-signature holds no v1 entry' };
	for (const secret of secrets) {
		const expected = createHmac('sha256', key(secret))
			.update(`${id}.${stamp}.`)
			.update(body)
			.digest();
		for (const candidate of given) {
			if (candidate.length === expected.length && timingSafeEqual(candidate, expected)) {
				return { ok: true, id, timestamp };
			}
		}
	}
	return { ok: false, reason: 'no signature matches' };
}
