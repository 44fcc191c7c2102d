/**
 * oncegate answers every refusal as RFC 9457 problem+json
 * (`{type, title, status, detail, field?, state?, violations?}`). These
 * helpers turn one into what an n8n error shows: the problem's title as the
 * message and its detail (with the field, the run's state and any schema
 * violations) as the description, never a bare status code.
 */

export interface Violation {
	path?: string;
	message?: string;
}

export interface Problem {
	type?: string;
	title?: string;
	status?: number;
	detail?: string;
	field?: string;
	state?: string;
	violations?: Violation[];
	[extra: string]: unknown;
}

const PROBLEM_PREFIX = 'urn:oncegate:problem:';

export interface ProblemText {
	message: string;
	description: string;
	httpCode: string;
}

/** Whether `body` looks like a problem document. */
export function isProblem(body: unknown): body is Problem {
	return (
		typeof body === 'object' &&
		body !== null &&
		!Array.isArray(body) &&
		(typeof (body as Problem).title === 'string' || typeof (body as Problem).detail === 'string')
	);
}

/** The message and description an n8n error shows for an answer of `status`. */
export function problemText(status: number, body: unknown): ProblemText {
	const httpCode = String(status);
	if (!isProblem(body)) {
		const text = typeof body === 'string' ? body.trim().slice(0, 500) : '';
		return {
			message: `oncegate answered ${status} without a problem document`,
			description: text || 'The answer had no body. Check the base URL in the credentials.',
			httpCode,
		};
	}
	const parts: string[] = [];
	if (body.detail) parts.push(body.detail);
	if (body.field) parts.push(`Field: ${body.field}.`);
	if (body.state) parts.push(`The run is ${body.state}.`);
	for (const v of body.violations ?? []) {
		parts.push(`${v.path ?? '/'}: ${v.message ?? 'invalid'}`);
	}
	// oncegate's titles are the status's reason phrase; its type names the problem.
	const slug = body.type?.startsWith(PROBLEM_PREFIX) ? body.type.slice(PROBLEM_PREFIX.length) : undefined;
	const title = [body.title, slug].filter(Boolean).join(': ');
	return {
		message: title ? `${title} (${status})` : `oncegate answered ${status}`,
		description: parts.join(' ') || (body.type ?? ''),
		httpCode,
	};
}

/** An error text cut to what oncegate stores, without control characters. */
export function sanitiseError(text: unknown, max = 1000): string {
	let s: string;
	if (typeof text === 'string') s = text;
	else if (text instanceof Error) s = text.message;
	else if (text && typeof text === 'object' && typeof (text as { message?: unknown }).message === 'string')
		s = (text as { message: string }).message;
	else s = text === undefined || text === null ? '' : JSON.stringify(text);
	// eslint-disable-next-line no-control-regex
	s = s.replace(/[\u0000-\u001f\u007f]+/g, ' ').replace(/\s+/g, ' ').trim();
	if (s.length > max) s = `${s.slice(0, max - 1)}…`;
	return s || 'failed without a message';
}
